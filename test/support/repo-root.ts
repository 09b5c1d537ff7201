import fs from 'node:fs';
import path from 'node:path';

/** The repository root: the nearest folder up from `from` with the workspace's package.json. */
export function findRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest) && 'workspaces' in JSON.parse(fs.readFileSync(manifest, 'utf8'))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no workspace package.json above ${from}`);
  }
}
