import { readFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, CoordinatorClient, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import {
  createDashboard,
  CSRF_HEADER,
  type Dashboard,
  type DashboardListener,
  MAX_LIVE_BACKLOG_BYTES,
  MAX_LIVE_CONNECTIONS,
  MAX_WATCHED_GROUPS,
} from '@redis-stream-coordinator/dashboard';
import { memberFactory } from '../support/member-factory';
import { proxyFactory } from '../support/proxy-fixture';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

/** The plain Node handler with actions on, in a bare http.Server: guard, CSRF, read-only, errors. */
const redis = useRedisServer();
const aMember = memberFactory(redis, { handler: async () => undefined });
const aProxy = proxyFactory(redis);

interface Served {
  dashboard: Dashboard;
  url: string;
  /** The responses of the live streams, as the server holds them. */
  liveResponses: http.ServerResponse[];
  close: () => Promise<void>;
}

async function serve(options: Omit<Parameters<typeof createDashboard>[0], 'redis'>, client = redis.client()): Promise<Served> {
  const dashboard = createDashboard({ redis: client, ...options });
  const liveResponses: http.ServerResponse[] = [];
  const server = http.createServer((request, response) => {
    if (request.url?.endsWith('/live')) liveResponses.push(response);
    void dashboard.handle(request, response);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    dashboard,
    url,
    liveResponses,
    close: async () => {
      await dashboard.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The page's cookie and token, as a browser gets them. */
async function session(url: string): Promise<{ cookie: string; token: string }> {
  const page = await fetch(`${url}/rsc/`);
  const cookie = page.headers.get('set-cookie')!.split(';')[0];
  const token = /name="rsc-csrf" content="([^"]+)"/.exec(await page.text())![1];
  return { cookie, token };
}

/** A stream whose group list names these groups (what the dashboard checks before it watches one). */
async function aListedGroup(...groups: string[]): Promise<string> {
  const stream = uniqueName('listed');
  await redis.client().sadd(new KeyBuilder().streamGroups(stream), ...groups);
  return stream;
}

/**
 * Opens a live stream and returns its status, leaving it open until `controller` aborts. The
 * Response is held until then: fetch cancels the body of a Response garbage collected unread,
 * which closes the connection, so a dropped reference lets a GC close live streams behind the
 * test's back (and others take their slots).
 */
async function openLive(url: string, stream: string, group: string, controller: AbortController): Promise<number> {
  const response = await fetch(`${url}/rsc/api/groups/${stream}/${group}/live`, { signal: controller.signal });
  controller.signal.addEventListener('abort', () => void response.body?.cancel().catch(() => undefined), { once: true });
  return response.status;
}

/** A full garbage collection now: what a loaded machine does at any moment, made to happen where a test must survive it. */
function collectGarbage(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

/**
 * Most a client that never reads takes over TCP before the server's write() says false: the largest
 * send buffer and the receive buffer, doubled for the kernel's accounting (16 MB where /proc does not say).
 */
const KERNEL_SOCKET_BYTES = (() => {
  try {
    const max = (file: string, field: number) => Number(readFileSync(`/proc/sys/net/ipv4/${file}`, 'utf8').trim().split(/\s+/)[field]);
    return 2 * (max('tcp_wmem', 2) + max('tcp_rmem', 1));
  } catch {
    return 16 * 1024 * 1024;
  }
})();
/**
 * Longest a watch with browsers (refreshMs 500) goes without sending: a round every refresh, or a
 * problem once Redis is 5 s late (redisLateAfterMs); doubled for timers late on a loaded machine.
 */
const SILENT_ROUND_MS = 2 * (5_000 + 500);

function listeners() {
  const state: DashboardListener = { id: 'orders', kind: 'listener', running: true, paused: false, concurrency: 2 };
  return { state, list: () => [state], pause: () => void (state.paused = true), resume: () => void (state.paused = false) };
}

describe('dashboard options', () => {
  it('readOnly: false without a guard is refused, naming the option', () => {
    expect(() => createDashboard({ redis: redis.client(), readOnly: false })).toThrow(/readOnly: false needs a guard/);
  });
  it('a bad path or refresh names the option and the value', () => {
    expect(() => createDashboard({ redis: redis.client(), path: 'rsc/' })).toThrow(/path must look like \/rsc .* got "rsc\/"/);
    expect(() => createDashboard({ redis: redis.client(), refreshMs: 10 })).toThrow(
      /refreshMs must be an integer from 500 to 60000, got 10/,
    );
  });
});

describe('dashboard actions', () => {
  let served: Served;
  const control = listeners();
  let allowWrites = true;
  beforeAll(async () => {
    served = await serve({ readOnly: false, listeners: control, guard: (_request, access) => access === 'read' || allowWrites });
  });
  afterAll(() => served.close());

  it("with the page's CSRF token and the guard's yes, pause and resume act", async () => {
    const { cookie, token } = await session(served.url);
    const post = (verb: string) =>
      fetch(`${served.url}/rsc/api/listeners/orders/${verb}`, {
        method: 'POST',
        headers: { cookie, [CSRF_HEADER]: token, 'content-type': 'application/json' },
        body: '{}',
      });
    expect((await post('pause')).status).toBe(200);
    expect(control.state.paused).toBe(true);
    expect((await post('resume')).status).toBe(200);
    expect(control.state.paused).toBe(false);
  });

  it('refuses a request without the token, with another token, from another origin, or as a form', async () => {
    const { cookie, token } = await session(served.url);
    const url = `${served.url}/rsc/api/listeners/orders/pause`;
    const attempts: { headers: Record<string, string>; error: RegExp }[] = [
      { headers: { cookie, 'content-type': 'application/json' }, error: /CSRF check failed: the x-rsc-csrf header does not match/ },
      {
        headers: { cookie, [CSRF_HEADER]: token.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')), 'content-type': 'application/json' },
        error: /does not match/,
      },
      { headers: { [CSRF_HEADER]: token, 'content-type': 'application/json' }, error: /no CSRF cookie/ },
      {
        headers: { cookie, [CSRF_HEADER]: token, 'content-type': 'application/json', origin: 'https://evil.example' },
        error: /cross-origin request from https:\/\/evil.example/,
      },
      {
        headers: { cookie, [CSRF_HEADER]: token, 'content-type': 'application/x-www-form-urlencoded' },
        error: /actions take application\/json/,
      },
    ];
    for (const attempt of attempts) {
      const response = await fetch(url, { method: 'POST', headers: attempt.headers, body: '{}' });
      expect(response.status).toBeGreaterThanOrEqual(400);
      expect((await response.json()).error).toMatch(attempt.error);
    }
    expect(control.state.paused).toBe(false);
  });

  it("the guard's no refuses an action, with a valid token", async () => {
    const { cookie, token } = await session(served.url);
    allowWrites = false;
    try {
      const response = await fetch(`${served.url}/rsc/api/listeners/orders/pause`, {
        method: 'POST',
        headers: { cookie, [CSRF_HEADER]: token, 'content-type': 'application/json' },
        body: '{}',
      });
      expect(response.status).toBe(403);
      expect((await response.json()).error).toBe('the guard refused this action');
      expect(control.state.paused).toBe(false);
    } finally {
      allowWrites = true;
    }
  });

  it('purges a dead letter by its ref; a malformed ref is a 400 naming it', async () => {
    const stream = uniqueName('dl');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix: stream, shardCount: 2 });
    const id = await redis
      .client()
      .xadd(new KeyBuilder().shardDeadLetterStream(stream, 1, 'g'), '*', 'entryId', '1-0', 'error', 'boom', 'attempts', '3');
    const { cookie, token } = await session(served.url);
    const purge = (ref: string) =>
      fetch(`${served.url}/rsc/api/groups/${stream}/g/dead-letters/purge`, {
        method: 'POST',
        headers: { cookie, [CSRF_HEADER]: token, 'content-type': 'application/json' },
        body: JSON.stringify({ ref }),
      });
    const bad = await purge('nonsense');
    expect(bad.status).toBe(400);
    expect((await bad.json()).error).toMatch(/dead letter ref "nonsense" is invalid/);
    const good = await purge(`1/${id}`);
    expect(good.status).toBe(200);
    expect(await admin.readDeadLetters(stream, 'g')).toEqual([]);
  });
});

describe('dashboard reads', () => {
  it("the guard's no closes the page itself", async () => {
    const served = await serve({ guard: () => false });
    try {
      const response = await fetch(`${served.url}/rsc/`);
      expect(response.status).toBe(403);
    } finally {
      await served.close();
    }
  });

  it('a group that cannot be read is one problem on the live stream, in stats() and one error event; it clears when the group is back', async () => {
    const served = await serve({ refreshMs: 500 });
    const errors: Error[] = [];
    served.dashboard.on('error', (error) => errors.push(error));
    const stream = uniqueName('live');
    const first = aMember({ streamPrefix: stream, consumerGroup: 'g', shardCount: 2, handler: async () => undefined });
    await first.start();
    await first.stop();
    // The group's record is lost (Redis lost keys, an operator deleted it): the group is listed but cannot be read.
    await redis.client().del(new KeyBuilder().groupKeys(stream, 'g')[2]);
    const controller = new AbortController();
    try {
      const response = await fetch(`${served.url}/rsc/api/groups/${stream}/g/live`, { signal: controller.signal });
      expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
      const reader = response.body!.getReader();
      let text = '';
      const readUntil = (pattern: RegExp) =>
        pollUntil(
          `the live stream to show ${pattern}`,
          async () => {
            const { value } = await reader.read();
            text += new TextDecoder().decode(value);
            return pattern.test(text);
          },
          { timeoutMs: 15_000, intervalMs: 0 },
        );
      await readUntil(/event: problem\ndata: .*does not exist/);
      expect(served.dashboard.stats().problems.join()).toMatch(/does not exist/);
      await pollUntil('one error event', async () => errors.length === 1);

      const member = aMember({ streamPrefix: stream, consumerGroup: 'g', shardCount: 2, handler: async () => undefined });
      await member.start();
      try {
        await readUntil(/event: recovered[\s\S]*event: snapshot/);
        expect(served.dashboard.stats().problems).toEqual([]);
        expect(errors).toHaveLength(1); // the same problem, repeated each round, was reported once
      } finally {
        await member.stop();
      }
    } finally {
      controller.abort();
      await served.close();
    }
  });

  it("the live snapshot carries each shard's scheduled and deferred counts and next due times, the group's totals, and the counts the page shows", async () => {
    const served = await serve({ refreshMs: 500 });
    const stream = uniqueName('live-schedules');
    const member = aMember({ streamPrefix: stream, consumerGroup: 'g', shardCount: 2, handler: async () => undefined });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix: stream });
    const sent = await producer.send({ shardIndex: 1, payload: { text: '<script>x</script>' }, delayMs: 3_600_000 });
    const controller = new AbortController();
    try {
      const response = await fetch(`${served.url}/rsc/api/groups/${stream}/g/live`, { signal: controller.signal });
      const reader = response.body!.getReader();
      let text = '';
      await pollUntil(
        'a snapshot',
        async () => {
          const { value } = await reader.read();
          text += new TextDecoder().decode(value);
          return /event: (hello|snapshot)\ndata: .*"snapshot":\{.*\n/.test(text);
        },
        { timeoutMs: 15_000, intervalMs: 0 },
      );
      // The first message that carries a snapshot (hello has one once the group was read, every snapshot event has one).
      const data = /event: (?:hello|snapshot)\ndata: (.*"snapshot":\{.*)\n/.exec(text)![1];
      const { snapshot } = JSON.parse(data) as {
        snapshot: { scheduleCounts: string[]; group: Record<string, unknown>; shards: Record<string, unknown>[] };
      };
      expect(snapshot.scheduleCounts).toEqual(['scheduled', 'deferred', 'parked']);
      expect(snapshot.shards[1]).toMatchObject({
        scheduled: 1,
        deferred: 0,
        parked: 0,
        nextDueAt: { scheduled: sent.dueAt, deferred: null },
      });
      expect(snapshot.group).toMatchObject({ scheduled: 1, deferred: 0, parked: 0, nextDueAt: { scheduled: sent.dueAt, deferred: null } });
    } finally {
      controller.abort();
      await served.close();
      await member.stop();
    }
  });

  it('a Redis that does not answer gets each request a 504 within its bound, not a request held for ever (SPEC 10.1)', async () => {
    const proxy = await aProxy();
    const served = await serve({ refreshMs: 500 }, redis.clientAt(proxy.url));
    const stream = await aListedGroup('g');
    try {
      // Connected before the freeze (no overview read yet: a fresh one would be reused for 5 s).
      await (served.dashboard.options.redis as { ping(): Promise<string> }).ping();
      proxy.freeze();
      const started = Date.now();
      const [overview, letters, live] = await Promise.all([
        fetch(`${served.url}/rsc/api/overview`),
        fetch(`${served.url}/rsc/api/groups/${stream}/g/dead-letters`),
        fetch(`${served.url}/rsc/api/groups/${stream}/g/live`),
      ]);
      expect(Date.now() - started).toBeLessThan(15_000);
      for (const [response, what] of [
        [overview, 'the overview'],
        [letters, 'the dead letters'],
        [live, 'the group lookup'],
      ] as const) {
        expect(response.status).toBe(504);
        expect((await response.json()).error).toContain(`Redis has not answered ${what} within 5 s`);
      }
      expect(served.dashboard.stats().liveConnections).toBe(0);
      proxy.thaw();
      await pollUntil(
        'the dead letters read again once Redis answers',
        async () => (await fetch(`${served.url}/rsc/api/groups/${stream}/g/dead-letters`)).status === 200,
      );
    } finally {
      proxy.thaw();
      await served.close();
    }
  });

  it('browsers watching one group share one reader', async () => {
    const served = await serve({});
    const stream = await aListedGroup('g');
    const controllers = [new AbortController(), new AbortController(), new AbortController()];
    try {
      await Promise.all(controllers.map((c) => openLive(served.url, stream, 'g', c)));
      await pollUntil('three live streams', async () => served.dashboard.stats().liveConnections === 3);
      expect(served.dashboard.stats().watchedGroups).toBe(1);
    } finally {
      for (const c of controllers) c.abort();
      await served.close();
    }
  });
});

describe('live streams are bounded (SPEC 10.3)', () => {
  it('live requests for groups that do not exist are refused (404) and leave no watch polling Redis', async () => {
    const served = await serve({ refreshMs: 500 });
    try {
      const stream = await aListedGroup('real');
      const statuses: number[] = [];
      for (let batch = 0; batch < 20; batch++) {
        await Promise.all(
          Array.from({ length: 20 }, async (_, i) => {
            const controller = new AbortController();
            statuses.push(await openLive(served.url, stream, `made-up-${batch}-${i}`, controller));
            controller.abort(); // closed at once
          }),
        );
      }
      expect(statuses.filter((status) => status === 404)).toHaveLength(400);
      expect(served.dashboard.stats()).toMatchObject({ watchedGroups: 0, liveConnections: 0, refusedLiveStreams: 400 });
    } finally {
      await served.close();
    }
  });

  it('at MAX_WATCHED_GROUPS another group takes the place of an idle watch, and is refused (503) while every watch has a browser', async () => {
    const served = await serve({ refreshMs: 60_000 });
    const names = Array.from({ length: MAX_WATCHED_GROUPS + 1 }, (_, i) => `g${i}`);
    const stream = await aListedGroup(...names);
    const controllers = names.map(() => new AbortController());
    try {
      const opened = await Promise.all(
        names.slice(0, MAX_WATCHED_GROUPS).map((name, i) => openLive(served.url, stream, name, controllers[i])),
      );
      expect(opened.every((status) => status === 200)).toBe(true);
      expect(served.dashboard.stats().watchedGroups).toBe(MAX_WATCHED_GROUPS);
      collectGarbage(); // the browsers still hold their streams: none closes, no watch turns idle
      const last = names[MAX_WATCHED_GROUPS];
      expect(await openLive(served.url, stream, last, controllers[MAX_WATCHED_GROUPS])).toBe(503);
      controllers[0].abort(); // g0's only browser leaves: its watch lingers, idle
      await pollUntil('g0 without browsers', async () => served.dashboard.stats().liveConnections === MAX_WATCHED_GROUPS - 1, {
        state: () => served.dashboard.stats(),
      });
      expect(await openLive(served.url, stream, last, controllers[MAX_WATCHED_GROUPS])).toBe(200);
      expect(served.dashboard.stats().watchedGroups).toBe(MAX_WATCHED_GROUPS);
    } finally {
      for (const controller of controllers) controller.abort();
      await served.close();
    }
  });

  it('at MAX_LIVE_CONNECTIONS another live stream is refused (503)', async () => {
    const served = await serve({ refreshMs: 60_000 });
    const stream = await aListedGroup('g');
    const controllers = Array.from({ length: MAX_LIVE_CONNECTIONS + 1 }, () => new AbortController());
    try {
      const opened = await Promise.all(controllers.slice(0, MAX_LIVE_CONNECTIONS).map((c) => openLive(served.url, stream, 'g', c)));
      expect(opened.every((status) => status === 200)).toBe(true);
      expect(await openLive(served.url, stream, 'g', controllers[MAX_LIVE_CONNECTIONS])).toBe(503);
      expect(served.dashboard.stats()).toMatchObject({ liveConnections: MAX_LIVE_CONNECTIONS, watchedGroups: 1 });
    } finally {
      for (const controller of controllers) controller.abort();
      await served.close();
    }
  });

  it('MAX_LIVE_CONNECTIONS holds while Redis is slow: requests waiting for the group lookup count against it', async () => {
    const served = await serve({ refreshMs: 60_000 });
    const stream = await aListedGroup('g');
    const controllers = Array.from({ length: MAX_LIVE_CONNECTIONS + 50 }, () => new AbortController());
    // Redis slow for a moment: every request is in the group lookup at once, none is open yet.
    await redis.client().call('CLIENT', 'PAUSE', '1000', 'ALL');
    try {
      const statuses = await Promise.all(controllers.map((c) => openLive(served.url, stream, 'g', c)));
      expect(statuses.filter((status) => status === 200)).toHaveLength(MAX_LIVE_CONNECTIONS);
      expect(statuses.filter((status) => status === 503)).toHaveLength(50);
      expect(served.dashboard.stats()).toMatchObject({ liveConnections: MAX_LIVE_CONNECTIONS, refusedLiveStreams: 50 });
    } finally {
      for (const controller of controllers) controller.abort();
      await served.close();
    }
  });

  it('clients that never read hold at most a snapshot, one skipped snapshot and MAX_LIVE_BACKLOG_BYTES each', async () => {
    // A group with 2,000 shards to describe every refresh (a snapshot of about 220 KB): one join made it.
    const stream = uniqueName('wide');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix: stream, shardCount: 2000 });
    await new CoordinatorClient(redis.client()).heartbeat({
      streamPrefix: stream,
      consumerGroup: 'g',
      memberId: 'joined-once',
      memberEpoch: 0,
    });
    const served = await serve({ refreshMs: 500 });
    const sockets: net.Socket[] = [];
    const reader = new AbortController();
    try {
      // A client that reads: the size of one snapshot, and proof that snapshots keep coming.
      const response = await fetch(`${served.url}/rsc/api/groups/${stream}/g/live`, { signal: reader.signal });
      const body = response.body!.getReader();
      let text = '';
      await pollUntil(
        'two snapshots read',
        async () => {
          const { value } = await body.read();
          text += new TextDecoder().decode(value);
          return text.split('event: snapshot').length > 2;
        },
        { timeoutMs: 20_000, intervalMs: 0 },
      );
      const snapshotBytes = Math.max(...text.split('event: ').map((part) => Buffer.byteLength(part)));
      reader.abort(); // it read what it came for
      // Three clients that never read.
      const { port } = new URL(served.url);
      for (let i = 0; i < 3; i++) {
        const socket = net.connect(Number(port), '127.0.0.1');
        socket.on('error', () => undefined);
        socket.write(`GET /rsc/api/groups/${stream}/g/live HTTP/1.1\r\nhost: dashboard\r\n\r\n`);
        socket.pause();
        sockets.push(socket);
      }
      const stuck = () => served.liveResponses.slice(1);
      // The kernel takes what the socket buffers hold before write() says false (about 4.3 MB on
      // Linux: tcp_wmem's largest send buffer and the receive buffer), a dozen snapshots, each a
      // round apart, and rounds of 2,000 shards slow down on a loaded machine. So the wait is bounded
      // by progress, not by a clock: it fails when the silent clients got nothing for the time within
      // which a watch sends a snapshot or a problem, or took more than the kernel can hold unread.
      const sent = () => stuck().map((r) => r.socket?.bytesWritten ?? 0);
      const state = () => ({ sent: sent(), buffered: stuck().map((r) => r.writableLength), stats: served.dashboard.stats() });
      let lastSent = '';
      let progressAt = Date.now();
      await pollUntil(
        'the three silent clients back-pressured',
        async () => {
          if (stuck().length === 3 && stuck().every((r) => r.writableLength > 0)) return true;
          if (sent().join() !== lastSent) [lastSent, progressAt] = [sent().join(), Date.now()];
          if (Date.now() - progressAt > SILENT_ROUND_MS || Math.max(...sent()) > KERNEL_SOCKET_BYTES) {
            throw new Error(`the silent clients are not back-pressured and no more is sent to them: ${JSON.stringify(state())}`);
          }
          return false;
        },
        { timeoutMs: 45_000, intervalMs: 100, state },
      );
      // What one connection may hold: the message it was stuck on, an unsent snapshot, MAX_LIVE_BACKLOG_BYTES.
      // This group is idle (no events), so what piles up is snapshots: at most the hello and one snapshot in the buffer.
      const bound = 2 * snapshotBytes + 64 * 1024;
      expect(bound).toBeLessThan(MAX_LIVE_BACKLOG_BYTES + 2 * snapshotBytes);
      let most = 0;
      const until = Date.now() + 16 * 500; // sixteen more refreshes: without back-pressure, 16 more snapshots each
      while (Date.now() < until) {
        most = Math.max(most, ...stuck().map((r) => r.writableLength));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(most).toBeLessThanOrEqual(bound);
      const stats = served.dashboard.stats();
      expect(stats.liveConnectionsBehind).toBe(3);
      expect(stats.skippedSnapshots).toBeGreaterThan(0);
      expect(stats.liveBufferedBytes).toBeLessThanOrEqual(3 * bound);
    } finally {
      reader.abort();
      for (const socket of sockets) socket.destroy();
      await served.close();
    }
  }, 120_000);
});
