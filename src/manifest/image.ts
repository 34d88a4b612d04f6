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
