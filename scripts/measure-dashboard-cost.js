#!/usr/bin/env node
/**
 * What the dashboard costs Redis: a private redis-server, a stream of 1,024 shards read by a group
 * of 64 members (real CoordinatedMembers, heartbeating), then Redis' CPU (INFO cpu, user + sys)
 * over a fixed window with no page open, with one browser and with five browsers on the group's
 * page (each its own Chromium context: its own cookies, its own live stream).
 *
 *   npm run build --workspace packages/core --workspace packages/nestjs --workspace packages/dashboard
 *   node scripts/measure-dashboard-cost.js [--seconds 20] [--shards 1024] [--members 64]
 *
 * Prints one line per phase and a JSON summary; docs/dashboard.md quotes a run.
 */

const http = require('node:http');
const { parseArgs } = require('node:util');
const { Redis } = require('ioredis');
const { chromium } = require('playwright-core');
const { CoordinatedMember, CoordinatorAdmin } = require('../packages/core/dist');
const { RedisServer } = require('../packages/core/dist/testing');
const { createDashboard } = require('../packages/dashboard/dist');

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    shards: { type: 'string', default: '1024' },
    members: { type: 'string', default: '64' },
  },
});
const SECONDS = Number(values.seconds);
const SHARDS = Number(values.shards);
const MEMBERS = Number(values.members);
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

async function cpuSeconds(redis) {
  const info = await redis.info('cpu');
  const field = (name) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return field('used_cpu_user') + field('used_cpu_sys');
}

/** Redis CPU over the window, as a percentage of one core. */
async function measure(redis, label) {
  const before = await cpuSeconds(redis);
  const started = Date.now();
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000));
  const used = (await cpuSeconds(redis)) - before;
  const percent = (used / ((Date.now() - started) / 1000)) * 100;
  console.log(`${label.padEnd(34)} Redis CPU ${percent.toFixed(2)} % of one core`);
  return percent;
}

async function main() {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  const members = [];
  let browser;
  let httpServer;
  let dashboard;
  try {
    const admin = new CoordinatorAdmin(redis);
    await admin.createStream({ streamPrefix: 'cost', shardCount: SHARDS });
    for (let i = 0; i < MEMBERS; i++) {
      const member = new CoordinatedMember(new Redis(server.url), {
        streamPrefix: 'cost',
        consumerGroup: 'cost-group',
        memberName: `cost-${i}`,
        handler: async () => undefined,
      });
      member.on('error', () => undefined);
      members.push(member);
    }
    await Promise.all(members.map((m) => m.start()));
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { group, shards } = await admin.describeGroup('cost', 'cost-group');
      if (group.state === 'STABLE' && shards.every((s) => s.owner !== null)) break;
      if (Date.now() > deadline) throw new Error(`the group did not settle: ${group.state}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    console.log(`${MEMBERS} members own ${SHARDS} shards; measuring ${SECONDS} s per phase`);
    const results = { members: MEMBERS, shards: SHARDS, seconds: SECONDS };
    results.noPage = await measure(redis, 'members only, no page open');

    dashboard = createDashboard({ redis: new Redis(server.url), path: '/rsc' });
    httpServer = http.createServer((req, res) => void dashboard.handle(req, res));
    await new Promise((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${httpServer.address().port}/rsc/#/group/cost/cost-group`;
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true, args: FLAGS });
    const open = async () => {
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(url);
      await page.waitForSelector('#shard-map .shard[data-owner]', { timeout: 60_000 });
    };
    await open();
    results.oneBrowser = await measure(redis, '1 browser on the group page');
    for (let i = 1; i < 5; i++) await open();
    results.fiveBrowsers = await measure(redis, '5 browsers on the group page');
    results.dashboardShare = results.fiveBrowsers - results.noPage;
    console.log(`the dashboard with 5 browsers: +${results.dashboardShare.toFixed(2)} % of one core`);
    console.log(JSON.stringify(results));
  } finally {
    await browser?.close();
    await dashboard?.close();
    httpServer?.closeAllConnections();
    httpServer?.close();
    await Promise.all(members.map((m) => m.stop().catch(() => undefined)));
    redis.disconnect();
    await server.stop();
    process.exit(0);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
