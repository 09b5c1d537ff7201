import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { pollUntil } from '../support/poll';

const root = path.resolve(__dirname, '../..');
const running: ChildProcess[] = [];
// A demo starts, serves and shuts down as a whole process: slower than a unit test on a loaded machine.
vi.setConfig({ testTimeout: 90_000 });

// The demo runs from its build, as `npm run demo` runs it. `npm test` builds the packages it imports
// first (pretest: core, nestjs, and the dashboard it mounts; `npm run build` when this file runs
// alone); the demo itself is built here.
beforeAll(() => {
  const tsc = path.join(root, 'node_modules/.bin/tsc');
  execFileSync(tsc, ['-p', 'apps/demo/tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
}, 90_000); // seconds alone, past a hook's 30 s beside two other files on a loaded machine

afterEach(() => {
  for (const child of running.splice(0)) {
    // Whatever a failed test left: the demo's whole process group, its redis-server included.
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGKILL');
  }
});

interface Demo {
  child: ChildProcess;
  output: () => string;
  redisPid: number;
  redisPort: number;
  httpPort: number;
  exited: Promise<number | null>;
}

/** `node apps/demo/dist/main.js` in a process group of its own (as a terminal or a process manager starts it), once it answers HTTP. */
async function startDemo(): Promise<Demo> {
  const child = spawn(process.execPath, ['apps/demo/dist/main.js'], {
    cwd: root,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    // The demo's own shutdown deadline is generous: under a loaded machine (the whole suite runs in
    // parallel) a graceful stop of five members can take several seconds, and a test asserts what
    // happens, not how fast.
    env: { ...process.env, REDIS_URL: '', PORT: '0', NO_COLOR: '1', DEMO_SHUTDOWN_TIMEOUT_MS: '20000' },
  });
  running.push(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = await pollUntil(
    'the demo listening',
    async () => {
      const redis = /private redis-server \(pid (\d+)\): REDIS_URL=redis:\/\/127\.0\.0\.1:(\d+)/.exec(output);
      const http = /listening on http:\/\/localhost:(\d+)/.exec(output);
      if (child.exitCode !== null) throw new Error(`the demo exited with ${child.exitCode}:\n${output}`);
      return redis && http ? { redisPid: Number(redis[1]), redisPort: Number(redis[2]), httpPort: Number(http[1]) } : undefined;
    },
    { timeoutMs: 20_000 },
  );
  await pollUntil(
    'members joined',
    async () => (await fetch(`http://127.0.0.1:${started.httpPort}/health`).catch(() => undefined))?.status === 200,
    { timeoutMs: 20_000 },
  );
  return { child, output: () => output, redisPid: started.redisPid, redisPort: started.redisPort, httpPort: started.httpPort, exited };
}

/** The exit code, or a failure naming what the demo printed if it has not exited in time. */
async function exitCodeOf(demo: Demo, timeoutMs = 30_000): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the demo was still running ${timeoutMs} ms later:\n${demo.output().slice(-2000)}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([demo.exited, late]);
  } finally {
    clearTimeout(timer);
  }
}

const refusesConnections = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });

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
