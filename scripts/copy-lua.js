// Copies the coordinator's Lua scripts next to the compiled JavaScript, keeping the folder layout,
// so that the script loader finds them at the same relative path in src/ and dist/.
const fs = require('node:fs');
const _path = require('node:path');

const [from, to] = process.argv.slice(2);
if (!from || !to) {
  console.error('usage: node scripts/copy-lua.js <from-dir> <to-dir>');
  process.exit(2);
}
fs.rmSync(to, { recursive: true, force: true });
fs.cpSync(from, to, { recursive: true, filter: (src) => fs.statSync(src).isDirectory() || src.endsWith('.lua') });
