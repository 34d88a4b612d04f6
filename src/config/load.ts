/**
 * From YAML text (or a file) to a validated, frozen Config.
 */
import { isMap, isNode, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { ConfigError, createError, DOCUMENT_PATH } from '../errors.js';
import { describeReadError, hostFiles, readRegularFile, type ConfigFiles, type ConfigNote } from './files.js';
import type { Locator } from './issues.js';
import { validateConfig } from './validate.js';
import { ALIAS_BOMB_MESSAGE, nestingIssue, unresolvedAliasIssue, yamlErrorIssue } from './yaml.js';
import type { Config } from './types.js';

/** Maps a setting's path to the line and column of its value (or of its key) in the text. */
function locator(doc: Document, lines: LineCounter): Locator {
  return (path, atKey) => {
    // a problem with the whole document (empty, not a mapping) has no useful position
    if (path.length === 0) return undefined;
    let node: unknown = doc.contents;
    let offset: number | undefined;
    for (let i = 0; i < path.length; i++) {
      const seg = path[i];
      const last = i === path.length - 1;
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && String(isScalar(p.key) ? p.key.value : p.key) === String(seg));
        if (pair === undefined) return undefined;
        // an empty value (`priority:`) has no node, or a node without a range: point at the key
        const keyAt = isNode(pair.key) ? pair.key.range?.[0] : undefined;
        const valueAt = isNode(pair.value) ? pair.value.range?.[0] : undefined;
        if (last) offset = atKey ? keyAt : (valueAt ?? keyAt);
        node = pair.value;
      } else if (isSeq(node) && typeof seg === 'number') {
        node = node.items[seg];
        if (last) offset = isNode(node) ? node.range?.[0] : undefined;
      } else {
        return undefined;
      }
    }
    if (offset === undefined) return undefined;
    const pos = lines.linePos(offset);
    return { line: pos.line, column: pos.col };
  };
}

/**
 * Parses and validates configuration text (YAML 1.2). Pure: touches nothing on the system.
 *
 * @param text the file's content.
 * @param source where the text came from (a file path), for messages; optional.
 * @param options.files when given, the files the configuration names (apiserver.health.caFile
 *   and the others) are read through it and checked (see validateConfig); without it, pure.
 * @param options.notes receives a note per health file that does not exist yet (see validateConfig).
 * @returns the normalized, deep-frozen {@link Config}: durations in integer milliseconds
 *   (`…Ms`), the advertisement interval also in centiseconds (`advertisementIntervalCs`),
 *   `family` derived from the VIPs, IPv6 addresses in canonical form.
 * @throws ConfigError (BALLAST_E_CONFIG) for YAML syntax errors (path `(document)`, message
 *   naming the line and column, in ballast's words), for nesting deeper than MAX_NESTING (64)
 *   levels, for an empty file or one that is not a mapping, and for every
 *   invalid setting (path such as `vrrp.vrid`, with its line when known). All problems are
 *   reported together.
 */
export function parseConfig(text: string, source?: string, options: { files?: ConfigFiles; notes?: ConfigNote[] } = {}): Config {
  // composing the document recurses: bound the nesting first, on the (iterative) token stream
  const deep = nestingIssue(text, new LineCounter());
  if (deep !== null) throw new ConfigError([{ path: DOCUMENT_PATH, ...deep }], { source });
  const lines = new LineCounter();
  // uniqueKeys: a repeated key is an error, not "the last one wins"
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      doc.errors.map((e) => ({ path: DOCUMENT_PATH, ...yamlErrorIssue(e, lines) })),
      { source },
    );
  }
  const alias = unresolvedAliasIssue(doc, lines);
  if (alias !== null) throw new ConfigError([{ path: DOCUMENT_PATH, ...alias }], { source });
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    // only an alias bomb gets here; the library's text stays in `cause`
    throw new ConfigError([{ path: DOCUMENT_PATH, message: ALIAS_BOMB_MESSAGE }], { source, cause: err });
  }
  return validateConfig(value, {
    ...(source === undefined ? {} : { source }),
    locate: locator(doc, lines),
    ...(options.files === undefined ? {} : { files: options.files }),
    ...(options.notes === undefined ? {} : { notes: options.notes }),
  });
}

/**
 * Reads a configuration file (UTF-8 YAML) and validates it with {@link parseConfig}, including
 * the files it names (apiserver.health.caFile must exist and hold PEM certificates, and so on).
 * Synchronous: it runs once at startup, before anything else can proceed.
 *
 * @param path file path, as given by the operator (also used as the source in messages).
 * @param options.files how the named files are read; default the host's file system (tests
 *   pass a fake).
 * @param options.notes receives a note per health file (apiserver.health.caFile,
 *   clientCertFile, clientKeyFile, tokenFile) that does not exist yet: not an error, the
 *   checks wait for it (before `kubeadm init` the CA does not exist).
 * @returns the normalized, deep-frozen {@link Config}.
 * @throws BallastError BALLAST_E_CONFIG_READ when the file cannot be read (missing,
 *   permission denied, a directory); the fs error is its `cause`.
 * @throws ConfigError BALLAST_E_CONFIG when the file is not UTF-8, not valid YAML, or not a
 *   valid configuration, or a file it names is malformed or cannot be read (path such as
 *   `apiserver.health.caFile`), or vrrp.auth.keyFile is missing.
 */
export function loadConfig(path: string, options: { files?: ConfigFiles; notes?: ConfigNote[] } = {}): Config {
  let bytes: Buffer;
  try {
    bytes = readRegularFile(path);
  } catch (err) {
    throw createError('BALLAST_E_CONFIG_READ', `cannot read the configuration file ${path}: ${describeReadError(err)}`, {
      cause: err,
    });
  }
  let text: string;
  try {
    // fatal: a Latin-1 file would otherwise decode to U+FFFD and fail later, less clearly
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch (err) {
    throw new ConfigError([{ path: DOCUMENT_PATH, message: 'the file is not UTF-8 text' }], { source: path, cause: err });
  }
  return parseConfig(text, path, { files: options.files ?? hostFiles, ...(options.notes === undefined ? {} : { notes: options.notes }) });
}
