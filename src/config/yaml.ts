/**
 * The YAML layer, in ballast's words: how deep a file nests (checked on the token stream, before
 * anything recursive runs) and what each kind of YAML error means for an operator. The YAML
 * library's own sentences never reach a message; its error code and position do.
 */
import { CST, Parser, visit, type Document, type ErrorCode, type LineCounter } from 'yaml';
import { MAX_BACKENDS, MAX_ENTRIES, MAX_NESTING, SETTINGS_DEPTH } from './limits.js';

/** A problem with the file as a whole, at a line and column (1-based). */
export interface TextIssue {
  readonly message: string;
  readonly line: number;
  readonly column: number;
}

/**
 * The first collection (mapping or list, block or flow) nested deeper than {@link MAX_NESTING}
 * levels or holding more than {@link MAX_ENTRIES} entries, in text order, or null when there is
 * none. The top-level collection is level 1.
 *
 * Uses the library's token parser (CST), which keeps its own stack instead of recursing, and
 * walks the tokens with an explicit stack: neither uses the call stack, so 10^5 levels cost
 * time linear in the text and no stack overflow. Composing the document (and converting it to
 * data), which does recurse, runs only once this returned null.
 *
 * @param text the file's content; `lines` must be the LineCounter the parser fills.
 */
export function nestingIssue(text: string, lines: LineCounter): TextIssue | null {
  const stack: { token: CST.Token | null | undefined; depth: number }[] = [];
  for (const doc of new Parser(lines.addNewLine).parse(text)) {
    if (doc.type === 'document') stack.push({ token: doc.value, depth: 0 });
    while (stack.length > 0) {
      const { token, depth } = stack.pop()!;
      if (!CST.isCollection(token)) continue;
      const level = depth + 1;
      if (level > MAX_NESTING) {
        const { line, col } = lines.linePos(token.offset);
        return {
          message: `nests deeper than ${MAX_NESTING} levels at line ${line}, column ${col}; ballast's settings nest at most ${SETTINGS_DEPTH}`,
          line,
          column: col,
        };
      }
      if (token.items.length > MAX_ENTRIES) {
        const { line, col } = lines.linePos(token.offset);
        return {
          message: `a ${kindOf(token)} at line ${line}, column ${col} has ${token.items.length} entries, more than ${MAX_ENTRIES}; ballast's longest list (apiserver.backends) holds ${MAX_BACKENDS}`,
          line,
          column: col,
        };
      }
      // children in reverse, so the first one is walked first (text order)
      for (let i = token.items.length - 1; i >= 0; i--) {
        const item = token.items[i]!;
        stack.push({ token: item.value, depth: level });
        if (item.key) stack.push({ token: item.key, depth: level });
      }
    }
  }
  return null;
}

/** 'mapping' or 'list', as a message calls a collection token. */
function kindOf(token: CST.BlockMap | CST.BlockSequence | CST.FlowCollection): 'mapping' | 'list' {
  if (token.type === 'flow-collection') return token.start.source === '{' ? 'mapping' : 'list';
  return token.type === 'block-map' ? 'mapping' : 'list';
}

/** What each YAML error means, in ballast's words (the library's codes, yaml 2.x). */
const YAML_ERRORS: Readonly<Record<ErrorCode, string>> = {
  ALIAS_PROPS: 'an alias (*name) cannot carry an anchor or a tag of its own',
  BAD_ALIAS: 'this alias (*name) names no anchor (&name) defined before it',
  BAD_DIRECTIVE: 'a % directive that is not valid here; a configuration file needs none',
  BAD_DQ_ESCAPE: 'a backslash escape YAML does not know, in a "double-quoted" value; write \\\\ for a backslash, or use single quotes',
  BAD_INDENT: 'the indentation does not fit the lines above; indent the settings of one section by the same number of spaces',
  BAD_PROP_ORDER: 'an anchor (&name) or tag (!tag) in the wrong place; write it just before the value',
  BAD_SCALAR_START: 'a value cannot start with this character unquoted; put the value in quotes',
  BLOCK_AS_IMPLICIT_KEY: 'a key must be one line of text followed by ":"',
  BLOCK_IN_FLOW: 'a "- item" or "key: value" line inside [ ] or { }; inside brackets, separate the entries with commas',
  DUPLICATE_KEY: 'this key is already set in the same mapping; write each setting once',
  IMPOSSIBLE: 'this is not valid YAML',
  KEY_OVER_1024_CHARS: 'a key longer than 1024 characters',
  MISSING_CHAR: 'something is missing here: a closing quote or bracket, a comma between entries, or a space after ":"',
  MULTILINE_IMPLICIT_KEY: 'a key spans more than one line (often a bracket or quote above is not closed)',
  MULTIPLE_ANCHORS: 'a value with two anchors (&name); give it one',
  MULTIPLE_DOCS: 'the file holds more than one YAML document (---); ballast reads one',
  MULTIPLE_TAGS: 'a value with two tags (!tag); give it one',
  NON_STRING_KEY: 'a key must be a name, not a list or a mapping',
  RESOURCE_EXHAUSTION: 'the file is too complex to read here (nesting or aliases)',
  TAB_AS_INDENT: 'a tab is used to indent; YAML indents with spaces only',
  TAG_RESOLVE_FAILED: 'a tag (!tag) that cannot be applied to this value; settings need no tags, remove it',
  UNEXPECTED_TOKEN: 'unexpected text here: a stray ",", "]" or "}", or more text after a value',
  BAD_COLLECTION_TYPE: 'a tag (!tag) that does not fit this kind of value; remove it',
};

/** `YAML syntax error at line L, column C: <what it means>` for one error of the YAML library. */
export function yamlErrorIssue(error: { readonly code: ErrorCode; readonly pos: readonly [number, number] }, lines: LineCounter): TextIssue {
  const { line, col } = lines.linePos(error.pos[0]);
  const what = YAML_ERRORS[error.code] ?? 'this is not valid YAML';
  return { message: `YAML syntax error at line ${line}, column ${col}: ${what}`, line, column: col };
}

/**
 * The first alias (`*name`) that names no anchor defined before it, or null. The library
 * reports it only when converting to data, in its own words; this says it with the position.
 */
export function unresolvedAliasIssue(doc: Document, lines: LineCounter): TextIssue | null {
  let found: TextIssue | null = null;
  visit(doc, {
    Alias(_key, node) {
      if (node.resolve(doc) !== undefined) return undefined;
      const { line, col } = lines.linePos(node.range?.[0] ?? 0);
      found = { message: `YAML syntax error at line ${line}, column ${col}: ${YAML_ERRORS.BAD_ALIAS}`, line, column: col };
      return visit.BREAK;
    },
  });
  return found;
}

/** The message when converting the document to data fails: only alias expansion gets there (maxAliasCount). */
export const ALIAS_BOMB_MESSAGE = 'cannot be read as data: its aliases (*name) expand to too many copies of their anchors (&name); write the values out';
