import { type ChildProcess, execFileSync } from 'node:child_process';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { type DemoProcess, exitCodeOf, killGroups, refusesConnections, startDemoProcess } from '../support/demo-process';
import { pollUntil } from '../support/poll';

const root = path.resolve(__dirname, '../..');
const running: ChildProcess[] = [];
// A demo starts, serves and shuts down as a whole process, after three builds: slower than a unit test on a loaded machine.
vi.setConfig({ testTimeout: 90_000, hookTimeout: 120_000 });

// The demo runs from its build, as `npm run demo` runs it. `npm test` builds the packages it imports
// first (pretest: core, nestjs, and the dashboard it mounts; `npm run build` when this file runs
// alone); the demo itself is built here.
beforeAll(() => {
  const tsc = path.join(root, 'node_modules/.bin/tsc');
  execFileSync(tsc, ['-p', 'apps/demo/tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
}, 90_000); // seconds alone, past a hook's 30 s beside two other files on a loaded machine

// Whatever a failed test left: the demo's whole process group, its redis-server included.
afterEach(() => killGroups(running));

interface Demo extends DemoProcess {
  redisPid: number;
  redisPort: number;
}

/** `node apps/demo/dist/main.js` in a process group of its own (as a terminal or a process manager starts it), once it answers HTTP. */
async function startDemo(): Promise<Demo> {
  const demo = await startDemoProcess(process.execPath, ['apps/demo/dist/main.js'], {
    cwd: root,
    // The demo's own shutdown deadline is generous: under a loaded machine (the whole suite runs in
    // parallel) a graceful stop of five members can take several seconds, and a test asserts what
    // happens, not how fast.
    env: { ...process.env, REDIS_URL: '', PORT: '0', NO_COLOR: '1', DEMO_SHUTDOWN_TIMEOUT_MS: '20000' },
    running,
  });
  const redis = /private redis-server \(pid (\d+)\): REDIS_URL=redis:\/\/127\.0\.0\.1:(\d+)/.exec(demo.output());
  if (!redis) throw new Error(`the demo did not say which redis-server it started:\n${demo.output()}`);
  return { ...demo, redisPid: Number(redis[1]), redisPort: Number(redis[2]) };
}

describe("the demo's lifecycle", () => {
  it('SIGTERM to its process group (a process manager, timeout, Ctrl+C): the demo exits 0 and its redis-server is gone', async () => {
    const demo = await startDemo();
    // The redis-server is in the group too: it dies at once, while the members try to leave.
    process.kill(-demo.child.pid!, 'SIGTERM');
    const code = await exitCodeOf(demo);
    // On failure, what the demo printed says which step of its shutdown did not finish.
    expect({ code, output: code === 0 ? '' : demo.output().slice(-3000) }).toEqual({ code: 0, output: '' });
    await pollUntil('the redis-server gone', () => refusesConnections(demo.redisPort));
  });

  it('SIGTERM twice a few milliseconds apart (from the process group, and the copy npm passes on): one shutdown that drains, exit 0', async () => {
    const demo = await startDemo();
    process.kill(demo.child.pid!, 'SIGTERM');
    // The second once the first is being handled, as npm's copy arrives (two at once would merge into one).
    await pollUntil('the first SIGTERM handled', async () => /SIGTERM: members drain/.test(demo.output()), { intervalMs: 1 });
    process.kill(demo.child.pid!, 'SIGTERM');
    expect(await exitCodeOf(demo)).toBe(0);
    expect(demo.output()).not.toMatch(/again: stopping at once/);
    await pollUntil('the redis-server gone', () => refusesConnections(demo.redisPort));
  });

  it('SIGINT to the demo alone: the members leave, then it stops its redis-server and exits 0', async () => {
    const demo = await startDemo();
    process.kill(demo.child.pid!, 'SIGINT');
    expect(await exitCodeOf(demo)).toBe(0);
    expect(demo.output()).toMatch(/SIGINT: members drain and leave their groups/);
    await pollUntil('the redis-server gone', () => refusesConnections(demo.redisPort));
  });

  it('GET /listeners lists the listeners; POST /listeners/summaries/pause and /resume pause and resume one by id', async () => {
    const demo = await startDemo();
    const base = `http://127.0.0.1:${demo.httpPort}`;
    const listeners = await (await fetch(`${base}/listeners`)).json();
    expect(listeners).toEqual([
      { id: 'summaries', kind: 'listener', running: true, paused: false, concurrency: 4 },
      { id: 'audit', kind: 'consumer', running: true, paused: false, concurrency: 4 },
    ]);
    const paused = await fetch(`${base}/listeners/summaries/pause`, { method: 'POST' });
    expect(paused.status).toBe(200);
    expect(await paused.json()).toMatchObject({ id: 'summaries', paused: true });
    const health = (await (await fetch(`${base}/health/ready`)).json()) as {
      coordinator: { members: { listenerId: string; state: string }[] };
    };
    const states = health.coordinator.members
      .filter((m: { listenerId: string }) => m.listenerId === 'summaries')
      .map((m: { state: string }) => m.state);
    expect(states).toEqual(['paused', 'paused', 'paused', 'paused']);
    expect(await (await fetch(`${base}/listeners/summaries/resume`, { method: 'POST' })).json()).toMatchObject({ paused: false });
    expect((await fetch(`${base}/listeners/nope/pause`, { method: 'POST' })).status).toBe(404);
    process.kill(demo.child.pid!, 'SIGINT');
    expect(await exitCodeOf(demo)).toBe(0);
  });

  it('GET /metrics serves the OpenTelemetry series in Prometheus format, a posted summary counted as sent, consumed and acknowledged', async () => {
    const demo = await startDemo();
    const base = `http://127.0.0.1:${demo.httpPort}`;
    const posted = await fetch(`${base}/summaries`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ userId: 'u1', text: 'hi' }),
    });
    expect(posted.status).toBeLessThan(300);
    const scrape = async () => {
      const response = await fetch(`${base}/metrics`);
      expect(response.headers.get('content-type')).toMatch(/text\/plain/);
      return response.text();
    };
    // Two groups read the stream (summaries and audit): the entry is acknowledged twice.
    const text = await pollUntil('the summary acknowledged by both groups', async () => {
      const body = await scrape();
      const acked = [...body.matchAll(/^rsc_consumer_acknowledged_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
      return acked >= 2 && body;
    });
    for (const series of [
      'messaging_client_sent_messages_total',
      'messaging_client_consumed_messages_total',
      'messaging_process_duration_bucket',
      'rsc_consumer_owned_shards',
      'rsc_consumer_member_epoch',
      'rsc_consumer_lag',
      'rsc_consumer_pending',
      'rsc_coordinator_heartbeat_duration_count',
      'rsc_consumer_rebalances_total',
    ]) {
      expect(text).toContain(series);
    }
    expect(text).toMatch(/messaging_consumer_group_name="[^"]+"/);
    process.kill(demo.child.pid!, 'SIGINT');
    expect(await exitCodeOf(demo)).toBe(0);
  });

  it('its redis-server dies: the demo says so and exits 1 instead of reconnecting forever', async () => {
    const demo = await startDemo();
    process.kill(demo.redisPid, 'SIGKILL');
    expect(await exitCodeOf(demo)).toBe(1);
    expect(demo.output()).toMatch(new RegExp(`the private redis-server \\(pid ${demo.redisPid}\\) exited: the demo stops too`));
  });
});
