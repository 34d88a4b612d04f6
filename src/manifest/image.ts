/**
 * The image's name: what scripts/image.sh tags the image it builds with
 * (`ref=localhost/ballast:$version`, the test/unit/manifest.test.ts checks the two agree) and
 * the default `--image` of `ballast manifest static-pod | daemonset`. The `localhost/` host
 * matters: a bare `ballast:<version>` is docker.io/library/ballast to containerd and the kubelet,
 * which then pull it (ErrImagePull) instead of using the imported image.
 */
export const IMAGE_NAME = 'localhost/ballast';

/** The default image reference of `version`: `localhost/ballast:<version>`. */
export function defaultImage(version: string): string {
  return `${IMAGE_NAME}:${version}`;
}

// The image reference grammar of distribution/reference (reference.go's grammar comment), which
// containerd, CRI-O and the kubelet parse image names with:
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [domain "/"] path-component ["/" path-component]*   (at most 255 characters)
//   domain     := host [":" port-number]; host := domain-name | IPv4 | "[" IPv6 "]"
//   path-component := [a-z0-9]+ (separator [a-z0-9]+)*; separator := [_.] | "__" | [-]+
//   tag        := [\w][\w.-]{0,127}
//   digest     := algorithm ":" hex; algorithm := [A-Za-z][A-Za-z0-9]* ([+._-] [A-Za-z][A-Za-z0-9]*)*;
//                 hex := [0-9a-fA-F]{32,}
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const HOST = `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|\\[[0-9a-fA-F:.]+\\])`;
const DOMAIN = `${HOST}(?::[0-9]+)?`;
const PATH_COMPONENT = '[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*';
const NAME = `(?:${DOMAIN}/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*`;
const TAG = '[\\w][\\w.-]{0,127}';
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const REFERENCE = new RegExp(`^(${NAME})(?::${TAG})?(?:@${DIGEST})?$`);
const NAME_MAX = 255;

/**
 * Why `ref` is not an image reference (the grammar above), or null when it is one.
 * @returns a sentence for the operator, e.g. "is empty".
 */
export function imageRefProblem(ref: string): string | null {
  if (ref === '') return 'is empty';
  const m = REFERENCE.exec(ref);
  if (!m)
    return 'is not an image reference ([host[:port]/]path[:tag][@digest]: path components lowercase letters and digits separated by ".", "_", "__" or "-"; tag up to 128 of [A-Za-z0-9_.-]; digest algorithm:hex)';
  if (m[1]!.length > NAME_MAX) return `has a name longer than ${NAME_MAX} characters`;
  return null;
}
