/**
 * ESLint for the TypeScript of src/, test/, lab/, bench/ and scripts/ (`npm run lint:es`, part of
 * `npm run lint`), with typescript-eslint's type information (the project's tsconfig.json).
 *
 * Few rules, each one for a real failure: a promise nobody awaits or catches (an unhandled
 * rejection ends a daemon, or a failure passes silently), a promise where a callback's void
 * was expected, names that say what a thing is (camelCase values, PascalCase types,
 * UPPER_CASE constants). Formatting is Prettier's (.prettierrc.json), not ESLint's.
 */
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'dist-pkg*/**', 'build/**', 'node_modules/**', 'test-output/**', '.node/**', '**/*.js', '**/*.cjs'] },
  {
    files: ['**/*.ts'],
    extends: [eslint.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // a dropped promise: its rejection is unhandled (the process dies) or its failure unseen
      '@typescript-eslint/no-floating-promises': 'error',
      // an async function where a void callback is expected (an event handler): the same
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true }],
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'default', format: ['camelCase'], leadingUnderscore: 'allow' },
        { selector: 'variable', format: ['camelCase', 'UPPER_CASE', 'PascalCase'], leadingUnderscore: 'allow' },
        { selector: 'function', format: ['camelCase', 'PascalCase'] },
        { selector: 'parameter', format: ['camelCase', 'PascalCase'], leadingUnderscore: 'allow' },
        { selector: 'typeLike', format: ['PascalCase'] },
        { selector: 'enumMember', format: ['PascalCase', 'UPPER_CASE'] },
        { selector: 'classProperty', modifiers: ['static', 'readonly'], format: ['camelCase', 'UPPER_CASE'] },
        // names that are not ours: object keys and members that mirror a wire format, a kernel
        // struct, an HTTP header, a YAML key or an environment variable keep their spelling
        {
          selector: ['objectLiteralProperty', 'typeProperty', 'objectLiteralMethod', 'typeMethod', 'classProperty', 'classMethod', 'accessor', 'enumMember'],
          format: null,
          modifiers: ['requiresQuotes'],
        },
        {
          selector: ['objectLiteralProperty', 'typeProperty'],
          format: ['camelCase', 'UPPER_CASE', 'PascalCase', 'snake_case'],
          leadingUnderscore: 'allowSingleOrDouble',
        },
        // a library's visitor keys (yaml's `Alias`, `Scalar`) and a manifest's kinds
        { selector: 'objectLiteralMethod', format: ['camelCase', 'PascalCase'] },
        { selector: 'import', format: null },
      ],
      // the codebase's own choices: non-null assertions after a checked index, `{}` in a type
      // argument, empty catch blocks that say why in a comment
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-empty-object-type': 'off',
      'no-empty': ['error', { allowEmptyCatch: true }],
      // a regex that matches printed output keeps its spaces as printed
      'no-regex-spaces': 'off',
    },
  },
  {
    // tests and the lab use `any` and loose shapes where a fixture is built by hand
    files: ['test/**/*.ts', 'lab/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      // `Promise.all(handles.map((h) => h?.stop()))` over handles that may not exist yet is
      // the teardown idiom there: an undefined in Promise.all is no bug
      '@typescript-eslint/await-thenable': 'off',
    },
  },
);
