import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findRoot } from '../support/repo-root';

/**
 * The README's set-up tells a new user everything `npm test` needs, and `npm test` says at its end
 * what it could not run: the browser tests once skipped with a one-line reason in the middle of the
 * output, and the set-up never said they needed chromium.
 */
const root = findRoot(__dirname);
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');

/** The text of the README section under this heading, up to the next heading of its level. */
function section(heading: string): string {
  const start = readme.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`README.md has no section "## ${heading}"`);
  const end = readme.indexOf('\n## ', start + 1);
  return readme.slice(start, end < 0 ? undefined : end);
}

describe("the README's set-up and the end of npm test", () => {
  it('set-up says the browser tests need chromium, where it is looked for, and that .ci/run installs it (as .ci/run does)', () => {
    const setup = section('Set up on a fresh machine');
    expect(setup).toMatch(/chromium/);
    expect(setup).toContain('CHROMIUM_PATH');
    expect(setup).toContain('.ci/run');
    expect(fs.readFileSync(path.join(root, '.ci/run'), 'utf8')).toMatch(/apt-get install -y chromium/);
  });

  it('a run that skips a tier ends with the tier and why (vitest run, as npm test runs it after building)', () => {
    // Without the test runner's own variables, the nested run is a run of its own.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('VITEST') && name !== 'NODE_OPTIONS'));
    const output = execFileSync(path.join(root, 'node_modules/.bin/vitest'), ['run', 'test/dashboard/dashboard-browser.test.ts'], {
      cwd: root,
      env: { ...env, CHROMIUM_PATH: '/nonexistent/chromium', NO_COLOR: '1' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    const end = output.slice(output.lastIndexOf('Skipped tiers'));
    expect(end.trim()).toBe(
      "Skipped tiers (1):\n  - the dashboard in a browser, against the demo (test/dashboard/dashboard-browser.test.ts): /nonexistent/chromium is not installed (apt-get install chromium, or CHROMIUM_PATH=<a chromium binary>; .ci/run installs it): the dashboard's browser tests are skipped",
    );
  }, 150_000);
});
