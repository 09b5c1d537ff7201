import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import { createDashboard, CSRF_HEADER, type Dashboard, type DashboardListener } from '@redis-stream-coordinator/dashboard';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

/** The plain Node handler with actions on, in a bare http.Server: guard, CSRF, read-only, errors. */
const redis = useRedisServer();
const aMember = memberFactory(redis, { handler: async () => undefined });

interface Served {
  dashboard: Dashboard;
  url: string;
  close: () => Promise<void>;
}

async function serve(options: Omit<Parameters<typeof createDashboard>[0], 'redis'>): Promise<Served> {
  const dashboard = createDashboard({ redis: redis.client(), ...options });
  const server = http.createServer((request, response) => void dashboard.handle(request, response));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    dashboard,
    url,
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

  it('a group that cannot be read is one problem on the live stream, in stats() and one error event; it clears when the group appears', async () => {
    const served = await serve({ refreshMs: 500 });
    const errors: Error[] = [];
    served.dashboard.on('error', (error) => errors.push(error));
    const stream = uniqueName('live');
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

  it('browsers watching one group share one reader', async () => {
    const served = await serve({});
    const controllers = [new AbortController(), new AbortController(), new AbortController()];
    try {
      await Promise.all(controllers.map((c) => fetch(`${served.url}/rsc/api/groups/s/g/live`, { signal: c.signal })));
      await pollUntil('three live streams', async () => served.dashboard.stats().liveConnections === 3);
      expect(served.dashboard.stats().watchedGroups).toBe(1);
    } finally {
      for (const c of controllers) c.abort();
      await served.close();
    }
  });
});
