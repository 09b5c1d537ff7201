import { type ChildProcess, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { type DemoProcess, exitCodeOf, isAlive, killGroups, refusesConnections, startDemoProcess } from '../support/demo-process';
import { pollUntil } from '../support/poll';
import { findRoot } from '../support/repo-root';
import { describeTier, PACKAGING_TIER_SKIP } from '../support/tier';

/**
 * The README's first hour, word for word, in a clean copy of this tree (what `git clone` gives: the
 * tracked and new files, no `dist/`, no `node_modules/`): `npm ci`, then `npx rsc` as
 * docs/operations.md runs it, then two `npm run demo` on one Redis as the README starts them, and
 * the signals a terminal, `timeout` or a process manager sends them. Each step is a trap a new user
 * fell into: a registry package run instead of ours, two processes whose members had the same
 * names, a demo left running by a SIGTERM to npm.
 */
const root = findRoot(__dirname);
// npm ci, two builds and two demos on a machine shared with the rest of the suite.
vi.setConfig({ testTimeout: 120_000, hookTimeout: 300_000 });

let copy: string;
const running: ChildProcess[] = [];

/** The files a clone of this tree has, copied (a file deleted but not yet committed is left out). */
function cleanCopy(): string {
  const target = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-first-hour-'));
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' })
    .split('\0')
    .filter((file) => file !== '' && fs.existsSync(path.join(root, file)));
  for (const file of files) {
    fs.mkdirSync(path.dirname(path.join(target, file)), { recursive: true });
    fs.copyFileSync(path.join(root, file), path.join(target, file));
    fs.chmodSync(path.join(target, file), fs.statSync(path.join(root, file)).mode);
  }
  return target;
}

/** npm without what the test run's own npm put into the environment (the workspace, the script). */
function npmEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
  return { ...env, NO_COLOR: '1', ...extra };
}

describeTier("the README's first hour, from a clean copy of the tree", PACKAGING_TIER_SKIP, () => {
  beforeAll(() => {
    copy = cleanCopy();
    // The README's set-up. The packages come from npm's cache where it has them (the suite's own npm ci filled it).
    execFileSync('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], {
      cwd: copy,
      env: npmEnv(),
      stdio: 'pipe',
      timeout: 280_000,
    });
  });
  afterAll(() => {
    killGroups(running);
    if (copy) fs.rmSync(copy, { recursive: true, force: true });
  });
  it("`npx rsc --help` right after `npm ci` runs this repository's rsc, and asks the registry for nothing", () => {
    // --offline: a lookup of a package named rsc in the registry fails instead of being made.
    const help = execFileSync('npx', ['--offline', '--no-install', 'rsc', '--help'], {
      cwd: copy,
      env: npmEnv({ npm_config_offline: 'true' }),
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(help).toContain('Operate Redis Stream Coordinator streams and consumer groups');
    expect(fs.realpathSync(path.join(copy, 'node_modules/.bin/rsc'))).toBe(fs.realpathSync(path.join(copy, 'packages/cli/bin/rsc.js')));
  });

  describe('two `npm run demo` on one Redis, as the README starts the second one', () => {
    let redis: RedisServer;
    let client: Redis;
    let first: DemoProcess;
    let second: DemoProcess;
    const members = async (group: string) => (await new CoordinatorAdmin(client).describeGroup('summary', group)).members;
    const demo = () =>
      startDemoProcess('npm', ['run', 'demo'], {
        cwd: copy,
        env: npmEnv({ REDIS_URL: redis.url, PORT: '0', DEMO_SHUTDOWN_TIMEOUT_MS: '20000' }),
        running,
        timeoutMs: 240_000,
      });

    beforeAll(async () => {
      redis = await RedisServer.start();
      client = new Redis(redis.url);
      first = await demo();
      second = await demo();
    });

    afterAll(async () => {
      killGroups(running);
      client?.disconnect();
      await redis?.stop();
    });

    it('the members of each process are named after it: describeGroup tells the two demos apart', async () => {
      const active = await pollUntil('both demos in summary-group', async () => {
        const live = (await members('summary-group')).filter((m) => m.state === 'ACTIVE');
        return live.length === 8 && live;
      });
      const names = active.map((m) => m.memberName);
      expect(new Set(names).size).toBe(8);
      const host = os.hostname().split('.')[0];
      for (const demoProcess of [first, second]) {
        expect(names.filter((name) => name.endsWith(`@${host}:${demoProcess.nodePid}`))).toHaveLength(4);
      }
      const audit = (await members('audit-group')).filter((m) => m.state === 'ACTIVE').map((m) => m.memberName);
      expect(new Set(audit).size).toBe(2);
    });

    it("SIGTERM to the second demo's process group (timeout, a process manager): its members drain and leave, exit 0", async () => {
      const pid = second.nodePid;
      const before = (await members('summary-group')).filter((m) => m.memberName.endsWith(`:${pid}`)).map((m) => m.memberId);
      expect(before).toHaveLength(4);
      // npm forwards the signal to node, which has it from the group as well: one shutdown, not "again".
      process.kill(-second.child.pid!, 'SIGTERM');
      const code = await exitCodeOf(second, 60_000);
      expect({ code, output: code === 0 ? '' : second.output().slice(-3000) }).toEqual({ code: 0, output: '' });
      expect(second.output()).toMatch(/SIGTERM: members drain and leave their groups/);
      expect(second.output()).not.toMatch(/again: stopping at once/);
      const after = await members('summary-group');
      expect(after.filter((m) => before.includes(m.memberId)).map((m) => m.state)).toEqual(['LEFT', 'LEFT', 'LEFT', 'LEFT']);
    });

    it("SIGTERM to the first demo's npm alone: npm passes it on, the members leave, and no node process is left behind", async () => {
      process.kill(first.child.pid!, 'SIGTERM');
      expect(await exitCodeOf(first, 60_000)).toBe(0);
      await pollUntil("the demo's node process gone", async () => !isAlive(first.nodePid), { timeoutMs: 30_000 });
      expect(await refusesConnections(first.httpPort)).toBe(true);
      const left = (await members('summary-group')).filter((m) => m.memberName.endsWith(`:${first.nodePid}`));
      expect(left.map((m) => m.state)).toEqual(['LEFT', 'LEFT', 'LEFT', 'LEFT']);
    });
  });
});
