#!/usr/bin/env node
'use strict';
// The `rsc` bin. npm links a bin only when its file exists at install time, and in a clone of the
// repository dist/ does not exist yet when `npm ci` links the workspace: without a committed file
// here there would be no node_modules/.bin/rsc, and `npx rsc` would fetch an unrelated package of
// that name from the registry. The compiled command is loaded only now, with a clear message when
// it (or the core package it loads) has not been built.
const path = require('node:path');

let cli;
try {
  cli = require(path.join(__dirname, '..', 'dist', 'main.js'));
} catch (error) {
  const missing = error && error.code === 'MODULE_NOT_FOUND' && /Cannot find module '([^']*[\\/]dist[\\/][^']*)'/.exec(error.message);
  if (!missing) throw error;
  process.stderr.write(`rsc: error: not built (${missing[1]} is missing): run \`npm run build\` at the repository's root first\n`);
  process.exit(1);
}
void cli.main();
