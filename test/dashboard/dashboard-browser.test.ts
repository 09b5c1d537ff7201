/// <reference lib="dom" />
import 'reflect-metadata';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { StreamListenerRegistry, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { chromiumMissing, launchBrowser } from '../support/browser';
import { pollUntil } from '../support/poll';
import { describeTier } from '../support/tier';
import { useRedisServer } from '../support/vitest-redis';

/**
 * The dashboard in headless Chromium against the demo application (its AppModule, as
 * `npm run demo` runs it, with a private redis-server), read-only as the demo mounts it.
 * `RSC_SCREENSHOTS=1 npx vitest run test/dashboard/dashboard-browser.test.ts` refreshes the screenshots of
 * docs/dashboard.md.
 */
const missing = chromiumMissing();

const redis = useRedisServer();
// The screenshots go to docs/dashboard only when asked (RSC_SCREENSHOTS=1), so a test run leaves the
// tree as it found it; otherwise they are taken all the same, into a temporary folder.
const SHOTS =
  process.env.RSC_SCREENSHOTS === '1'
    ? path.resolve(__dirname, '../../docs/dashboard')
    : path.join(os.tmpdir(), `rsc-dashboard-shots-${process.pid}`);
const STREAM = 'summary';
const GROUP = 'summary-group';

describeTier('the dashboard in a browser, against the demo', missing, () => {
  const apps: INestApplication[] = [];
  let browser: Awaited<ReturnType<typeof launchBrowser>>;
  let base: string;

  async function startDemo(): Promise<INestApplication> {
    process.env.REDIS_URL = redis.server.url;
    // The demo's module reads REDIS_URL when it is loaded (as in apps/demo/src/main.ts).
    const { AppModule } = await import('../../apps/demo/src/app.module');
    const app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    apps.push(app);
    return app;
  }

  beforeAll(async () => {
    const first = await startDemo();
    base = `http://127.0.0.1:${(first.getHttpServer().address() as { port: number }).port}/rsc`;
    browser = await launchBrowser();
    fs.mkdirSync(SHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    for (const app of apps.reverse()) await app.close();
  }, 60_000);

  const owners = (page: Page) =>
    page.$$eval('#shard-map .shard', (cells) => [...new Set(cells.map((c) => c.getAttribute('data-owner')).filter((o) => o))].length);

  it('shows streams and groups, then the shard map change and the rebalance in the event log when a second demo joins', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${base}/`);
    await page.waitForSelector(`#streams tr[data-group="${GROUP}"] .badge.STABLE`, { timeout: 15_000 });
    expect(await page.textContent('#streams')).toContain('audit-group');
    await page.locator('#streams').screenshot({ path: path.join(SHOTS, 'streams.png') });

    await page.click(`a[href="#/group/${STREAM}/${GROUP}"]`);
    await page.waitForSelector('#shard-map .shard[data-owner]');
    await page.waitForFunction(() => document.querySelectorAll('#members tr[data-member]').length === 4);
    expect(await owners(page)).toBe(4);
    const eventsBefore = await page.$$eval('#events tr[data-type="SHARDS_REVOKING"]', (rows) => rows.length);

    await startDemo(); // four more members of summary-group
    await page.waitForFunction(() => document.querySelectorAll('#members tr[data-member]').length === 8, undefined, { timeout: 20_000 });
    await page.waitForFunction(
      () => {
        const cells = [...document.querySelectorAll('#shard-map .shard')];
        return (
          new Set(cells.map((c) => c.getAttribute('data-owner')).filter((o) => o)).size === 8 &&
          document.querySelector('#group-state')?.textContent === 'STABLE'
        );
      },
      undefined,
      { timeout: 20_000 },
    );
    // The rebalance arrived in the live log: the old owners revoked half their shards, a target was committed.
    await page.waitForFunction(
      (before) => document.querySelectorAll('#events tr[data-type="SHARDS_REVOKING"]').length > before,
      eventsBefore,
    );
    expect(await page.$$eval('#events tr[data-type="TARGET_COMMITTED"]', (rows) => rows.length)).toBeGreaterThan(1);
    await page.locator('#shard-map').screenshot({ path: path.join(SHOTS, 'shard-map.png') });
    await page.locator('#members').screenshot({ path: path.join(SHOTS, 'members.png') });
    await page.locator('#events').screenshot({ path: path.join(SHOTS, 'events.png') });
    await page.close();
  });

  it("draws the backlog over time, a resize's cutover, and dead letters", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${base}/#/group/${STREAM}/${GROUP}`);
    await page.waitForSelector('#members tr[data-member]');
    // A backlog that rises while the listeners are paused and falls once they resume.
    const listeners = apps.map((app) => app.get(StreamListenerRegistry).getOrThrow('summaries'));
    for (const listener of listeners) listener.pause();
    const publisher = apps[0].get(StreamPublisher);
    for (let i = 0; i < 300; i++)
      await publisher.publish(STREAM, {
        key: `user-${i % 40}`,
        payload: { userId: `user-${i % 40}`, text: `summary ${i}`, at: new Date().toISOString() },
      });
    await page.waitForFunction(
      () => /now: [1-9][\d,]* undelivered/.test(document.querySelector('#lag-chart')?.textContent ?? ''),
      undefined,
      { timeout: 15_000 },
    );
    for (const listener of listeners) listener.resume();
    await page.waitForFunction(
      () => /now: 0 undelivered, 0 pending/.test(document.querySelector('#lag-chart')?.textContent ?? ''),
      undefined,
      { timeout: 20_000 },
    );
    await page.locator('#lag-chart').screenshot({ path: path.join(SHOTS, 'lag-chart.png') });

    const admin = new CoordinatorAdmin(redis.client());
    const keys = new KeyBuilder();
    await redis
      .client()
      .xadd(
        keys.shardDeadLetterStream(STREAM, 2, GROUP),
        '*',
        'entryId',
        '1-0',
        'memberId',
        'summary-m2',
        'attempts',
        '3',
        'error',
        'SummaryValidationError: text must be a string',
        'fields',
        JSON.stringify(['k', 'user-7', 'p', '{"userId":"user-7","text":42}']),
      );
    // A grace long enough to look at: the cutover waits for it after the members have read the old shards.
    await admin.resizeShards(STREAM, 12, { graceMs: 60_000 });
    await page.waitForFunction(
      () => /Resize cutover: 8 → 12 shards/.test(document.querySelector('#cutover')?.textContent ?? ''),
      undefined,
      { timeout: 15_000 },
    );
    await page.locator('#cutover').screenshot({ path: path.join(SHOTS, 'cutover.png') });
    await page.click('#dead-letters button');
    await page.waitForSelector('#dead-letters tr[data-ref]');
    await page.locator('#dead-letters').screenshot({ path: path.join(SHOTS, 'dead-letters.png') });
    await page.close();
  });

  it('renders a <script> payload from Redis as text: nothing runs', async () => {
    const keys = new KeyBuilder();
    const client = redis.client();
    const hostile = {
      script: '<script>window.__pwned = "script"</script>',
      image: '<img src=x onerror="window.__pwned = \'img\'">',
    };
    await client.xadd(
      keys.groupEvents(STREAM, GROUP),
      '*',
      'type',
      hostile.image,
      'memberId',
      hostile.script,
      'groupEpoch',
      '1',
      'assignmentEpoch',
      '1',
      'detail',
      hostile.script,
    );
    await client.xadd(
      keys.shardDeadLetterStream(STREAM, 0, GROUP),
      '*',
      'entryId',
      '1-0',
      'memberId',
      hostile.image,
      'attempts',
      '5',
      'error',
      `Error: ${hostile.script}`,
      'fields',
      JSON.stringify(['p', hostile.image]),
    );

    const page = await browser.context.newPage();
    await page.goto(`${base}/#/group/${STREAM}/${GROUP}`);
    await page.waitForFunction((text) => document.querySelector('#events')?.textContent?.includes(text), hostile.script, {
      timeout: 15_000,
    });
    await page.waitForFunction((text) => document.querySelector('#dead-letters')?.textContent?.includes(text), `Error: ${hostile.script}`, {
      timeout: 15_000,
    });
    // Shown as the characters they are; no element was made of them and no script ran.
    expect(await page.textContent('#events')).toContain(hostile.image);
    expect(await page.textContent('#dead-letters')).toContain(hostile.image);
    expect(await page.$$eval('main script, main img', (found) => found.length)).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: string }).__pwned)).toBeUndefined();
    await page.close();
  });

  it("shows what waits in the group's schedules per shard, when it is next due, and the totals, as text", async () => {
    const admin = new CoordinatorAdmin(redis.client());
    const keys = new KeyBuilder();
    const hour = 3_600_000;
    const sent = await new StreamProducer(redis.client(), { streamPrefix: STREAM }).send({
      shardIndex: 1,
      key: '<script>window.__pwned = "schedule"</script>',
      payload: { text: 'later' },
      delayMs: hour,
    });
    // A deferred retry of the group on shard 2 as deferFenced-5.lua left it, before parking (its stream id as its schedule id; due in two hours).
    const now = await admin.serverTimeMs();
    await redis.client().zadd(keys.shardDeferred(STREAM, 2, GROUP), now + 2 * hour, '1-1');
    await redis.client().hset(keys.shardDeferredEntries(STREAM, 2, GROUP), '1-1', 'x');
    const page = await browser.context.newPage();
    try {
      await page.goto(`${base}/#/group/${STREAM}/${GROUP}`);
      await page.waitForFunction(() => document.querySelector('#schedules tr[data-shard="2"]') !== null, undefined, { timeout: 15_000 });
      expect(await page.textContent('#schedules tr[data-shard="1"] td[data-kind="scheduled"]')).toMatch(
        /^1 \(next in (59 min \d+ s|1 h 00 min)\)$/,
      );
      expect(await page.textContent('#schedules tr[data-shard="1"] td[data-kind="deferred"]')).toBe('0');
      expect(await page.textContent('#schedules tr[data-shard="2"] td[data-kind="deferred"]')).toMatch(
        /^1 \(next in (1 h 59 min|2 h 00 min)\)$/,
      );
      expect(await page.textContent('#schedule-totals')).toMatch(/scheduled 1 \(next in .*\)deferred 1 \(next in .*\)/);
      expect(await page.getAttribute('#shard-map .shard[data-shard="1"]', 'title')).toMatch(/ · scheduled 1 · deferred 0 · parked 0$/);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: string }).__pwned)).toBeUndefined();
      await page.locator('#schedules').screenshot({ path: path.join(SHOTS, 'schedules.png') });
    } finally {
      await page.close();
      await admin.dropScheduled({ streamPrefix: STREAM, shardIndex: 1 }, sent.id);
      await admin.dropScheduled({ streamPrefix: STREAM, shardIndex: 2, consumerGroup: GROUP }, '1-1');
    }
  });

  it("shows static members' instance ids, and a departed one as AWAY with its awaited shards and when the wait ends, as text", async () => {
    const hostileName = '<img src=x onerror="window.__pwned = \'member\'">';
    const member = new CoordinatedMember(redis.client(), {
      streamPrefix: 'static-page',
      consumerGroup: 'billing',
      shardCount: 3,
      memberInstanceId: 'billing-pod-a',
      memberName: hostileName,
      sessionTimeoutMs: 60_000,
      coordinator: { heartbeatIntervalMs: 200 },
      handler: () => undefined,
    });
    member.on('error', () => undefined);
    await member.start();
    await pollUntil('the member owns the three shards', async () => member.ownedShards().length === 3);
    await member.stop(); // departs: its shards wait for its next instance for 60 s

    const page = await browser.context.newPage();
    await page.goto(`${base}/#/group/static-page/billing`);
    await page.waitForSelector('#members .badge.AWAY', { timeout: 15_000 });
    const row = await page.$$eval('#members > table tbody tr[data-member="billing-pod-a"] td', (cells) => cells.map((c) => c.textContent));
    expect(row[0]).toBe(hostileName);
    expect(row[2]).toBe('AWAY');
    expect(row.at(-1)).toBe('billing-pod-a');
    const awaited = await page.$$eval('#awaited-members tbody tr td', (cells) => cells.map((c) => c.textContent));
    const description = await new CoordinatorAdmin(redis.client()).describeGroup('static-page', 'billing');
    const away = description.members[0];
    expect(awaited).toEqual(['billing-pod-a', away.departedAt, away.awaitedUntil, expect.stringMatching(/^\d+\.\d s$/), '0-2']);
    expect(await page.$$eval('main img, main script', (found) => found.length)).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: string }).__pwned)).toBeUndefined();
    await page.close();
  });

  it("refuses actions in read-only mode, even with the page's own CSRF token, and offers none", async () => {
    const page = await browser.context.newPage();
    await page.goto(`${base}/`);
    await page.waitForSelector('#listeners tr[data-listener="summaries"]');
    expect(await page.textContent('#mode')).toBe('read-only');
    expect(await page.$$eval('main button', (buttons) => buttons.map((b) => b.textContent))).toEqual([]);
    const reply = await page.evaluate(async () => {
      const token = document.querySelector('meta[name="rsc-csrf"]')!.getAttribute('content')!;
      const response = await fetch('/rsc/api/listeners/summaries/pause', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-rsc-csrf': token },
        body: '{}',
      });
      return { status: response.status, body: await response.json() };
    });
    expect(reply.status).toBe(403);
    expect(reply.body.error).toContain('read-only');
    expect(apps.every((app) => !app.get(StreamListenerRegistry).getOrThrow('summaries').isPaused())).toBe(true);
    await page.close();
  });
});
