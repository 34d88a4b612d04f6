/** What a configuration is refused with, for config tests: the issues of the ConfigError thrown. */
import { ConfigError, parseConfig, validateConfig, type ConfigIssue } from '../../src/config/index.js';

/** The issues parsing YAML `text` reports; throws (failing the test) when it does not throw a ConfigError. */
export function issuesOf(text: string): readonly ConfigIssue[] {
  try {
    parseConfig(text, 'test.yaml');
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  throw new Error(`expected a ConfigError for:\n${text.slice(0, 200)}`);
}

/** The issues validating `value` reports; [] when it is valid. */
export function validateIssues(value: unknown): readonly ConfigIssue[] {
  try {
    validateConfig(value);
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  return [];
}
