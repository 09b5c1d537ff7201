import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';

// A page shows an example file as `<!-- example: test/examples/x.ts -->` and a ```ts block under it;
// the block must be the file, word for word, so what a reader copies is what the tests run. No Redis.

const ROOT = findRoot(__dirname);
const MARKER = /<!-- example: (test\/examples\/[\w.-]+\.ts) -->\n```ts\n([\s\S]*?)```/g;

function pages(): string[] {
  const docs = fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => path.join('docs', name));
  return ['README.md', ...docs];
}

describe('the example blocks of the docs', () => {
  const blocks = pages().flatMap((page) =>
    [...fs.readFileSync(path.join(ROOT, page), 'utf8').matchAll(MARKER)].map((m) => ({ page, file: m[1], text: m[2] })),
  );

  it('are found in the pages that show examples', () => {
    const shown = new Set(blocks.map((b) => b.page));
    expect(shown).toContain('docs/testing.md');
    expect(shown).toContain('docs/nestjs.md');
  });

  it.each(blocks.map((b) => [`${b.page}: ${b.file}`, b] as const))('%s is the file, word for word', (_, block) => {
    expect(block.text).toBe(fs.readFileSync(path.join(ROOT, block.file), 'utf8'));
  });
});
