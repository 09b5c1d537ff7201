/**
 * npm run bench:rebalance [-- --quick] [-- --members 64 --shards 1024 --runs 5]
 *
 * Scenario 4 in detail, on its own: `members - 1` members (one process, one client) own every shard
 * of a STABLE group; one more member joins. Each run measures, from that member's `start()`:
 *   - owned: the group is STABLE, every shard OWNED, every member holding its share;
 *   - reading: then one entry is sent to each of the new member's shards, and has reached its
 *     handler (ownership that is not read yet is no rebalance);
 *   - the phases, from the group's event log (Redis time, ms): join to target committed, to the
 *     last revocation released, to the last shard assigned;
 *   - heartbeats sent by all members (CoordinatorClient calls in this process), coordinator script
 *     calls and PUBLISHes (INFO commandstats) until `owned`.
 * Writes the section "4a" of docs/benchmarks.md with the machine, versions and load average.
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, CoordinatorClient, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { loadAverage, progressSince, runCli, until } from './cli';
import { redisVersion, resetCommandStats } from './redis-stats';
import { SECTION_4A, spliceSection } from './report';
import { elapsedMs, type Spread, spread } from './stats';

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const numberArg = (name: string, fallback: number): number => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const MEMBERS = numberArg('members', quick ? 16 : 64);
const SHARDS = numberArg('shards', quick ? 256 : 1024);
const RUNS = numberArg('runs', quick ? 2 : 5);
const started = Date.now();
const progress = progressSince(started);
const load = loadAverage;

/** Heartbeats sent by every member of this process: the calls of CoordinatorClient.heartbeatOnce. */
let heartbeats = 0;
const heartbeatOnce = CoordinatorClient.prototype.heartbeatOnce;
CoordinatorClient.prototype.heartbeatOnce = function counted(this: CoordinatorClient, ...call) {
  heartbeats += 1;
  return heartbeatOnce.apply(this, call);
};
/** Target commits: with the heartbeats, every coordinator script call of the members. */
let commits = 0;
const commitAssignment = CoordinatorClient.prototype.commitAssignment;
CoordinatorClient.prototype.commitAssignment = function counted(this: CoordinatorClient, ...call) {
  commits += 1;
  return commitAssignment.apply(this, call);
};

interface RebalanceRun {
  ownedMs: number;
  readingMs: number;
  committedMs: number;
  releasedMs: number;
  assignedMs: number;
  heartbeats: number;
  /** Heartbeats and target commits: the coordinator's script calls. */
  coordinatorCalls: number;
  /** Every script call on Redis (the coordinator's, and the members' claims, takeovers, sweeps and reads' gap checks). */
  scriptCalls: number;
  publishes: number;
  /** 'error' events of the members during the measured rebalance (late heartbeats on a loaded machine). */
  errors: number;
  /** The first run only: the most script calls in one 100 ms window of the STABLE group over a sweep interval. */
  steadyBurst: number;
}

/** The members' sweeps run every 5 s (sweepIntervalMs): a window of that length sees each once. */
const STEADY_WATCH_MS = 5500;
const STEADY_WINDOW_MS = 100;

/**
 * The most script calls Redis ran in one STEADY_WINDOW_MS window of the STABLE group, watched over a
 * sweep interval: a count, so it means the same on a loaded machine. A burst here is what a
 * rebalance that meets it waits behind (every shard swept at once: two calls each).
 */
async function busiestWindow(redis: Redis): Promise<number> {
  let before = (await commandCalls(redis)).scripts;
  let most = 0;
  const end = Date.now() + STEADY_WATCH_MS;
  while (Date.now() < end) {
    await new Promise((resolve) => setTimeout(resolve, STEADY_WINDOW_MS));
    const now = (await commandCalls(redis)).scripts;
    most = Math.max(most, now - before);
    before = now;
  }
  return most;
}

async function commandCalls(redis: Redis): Promise<{ scripts: number; publishes: number }> {
  const info = await redis.info('commandstats');
  const calls = (name: string) => Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return { scripts: calls('evalsha') + calls('eval'), publishes: calls('publish') };
}

/** Milliseconds from the join to the last event of `type` (Redis time, from the event ids). */
function lastEventMs(events: { id: string; type: string }[], joinedAt: number, type: string): number {
  const times = events.filter((e) => e.type === type).map((e) => Number(e.id.split('-')[0]));
  return times.length === 0 ? Number.NaN : Math.max(...times) - joinedAt;
}

async function run(url: string, index: number): Promise<RebalanceRun> {
  const redis = new Redis(url);
  const admin = new CoordinatorAdmin(redis);
  const streamPrefix = `rebalance-${MEMBERS}-${SHARDS}-${index}-${Date.now()}`;
  await admin.createStream({ streamPrefix, shardCount: SHARDS });
  const handledBy = new Map<string, Set<number>>();
  let errors = 0;
  const make = (i: number) => {
    const memberId = `m${i}`;
    handledBy.set(memberId, new Set());
    const member = new CoordinatedMember(redis, {
      streamPrefix,
      consumerGroup: 'bench',
      memberId,
      runtimeMaxConcurrency: 4,
      handler: (message) => void handledBy.get(memberId)!.add(message.shardIndex),
    });
    // Counted, not fatal: a heartbeat late on a loaded machine is retried by the member itself.
    member.on('error', () => void (errors += 1));
    return member;
  };
  const first = Array.from({ length: MEMBERS - 1 }, (_, i) => make(i));
  await Promise.all(first.map((m) => m.start()));
  const stable = async () => {
    const d = await admin.describeGroup(streamPrefix, 'bench');
    return d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED');
  };
  await until(stable, 120_000);
  const steadyBurst = index === 0 ? await busiestWindow(redis) : Number.NaN;
  const last = make(MEMBERS - 1);
  const all = [...first, last];
  const share = Math.floor(SHARDS / MEMBERS);
  await resetCommandStats(redis);
  const heartbeatsBefore = heartbeats;
  const commitsBefore = commits;
  const errorsBefore = errors;

  const start = process.hrtime.bigint();
  const startedAt = Date.now();
  await last.start();
  // Timed when every member holds its share locally (each shard a member holds was granted to it,
  // and shares add up to every shard); the description (a script over every shard, tens of ms on
  // a loaded machine) only confirms it afterwards, and is not counted.
  let ownedMs = Number.NaN;
  await until(async () => {
    if (!all.every((m) => m.ownedShards().length >= share)) return false;
    const at = elapsedMs(start);
    if (!(await stable())) return false;
    ownedMs = at;
    return true;
  }, 60_000);
  const counted = heartbeats - heartbeatsBefore;
  const committed = commits - commitsBefore;
  const calls = await commandCalls(redis);

  const gained = last.ownedShards();
  const producer = new StreamProducer(redis, { streamPrefix });
  const handled = handledBy.get(last.memberId)!;
  await Promise.all(gained.map((shardIndex) => producer.send({ key: `probe-${shardIndex}`, payload: 1, shardIndex })));
  await until(() => gained.every((shard) => handled.has(shard)), 60_000);
  const readingMs = elapsedMs(start);

  const events = await admin.readGroupEvents(streamPrefix, 'bench', { count: 1000 });
  const joined = events.find((e) => e.type === 'MEMBER_JOINED' && e.memberId === last.memberId);
  const joinedAt = joined ? Number(joined.id.split('-')[0]) : Number.NaN;
  const after = events.filter((e) => joined && e.id >= joined.id);
  if (process.env.REBALANCE_EVENTS)
    progress(`    joined ${joinedAt - startedAt} ms after start(); start() returned; owned at ${ownedMs.toFixed(0)} ms`);
  if (process.env.REBALANCE_EVENTS)
    for (const e of after) progress(`    +${Number(e.id.split('-')[0]) - joinedAt} ${e.type} ${e.memberId} ${e.detail}`);
  await Promise.all(all.map((m) => m.stop()));
  redis.disconnect();
  return {
    ownedMs,
    readingMs,
    committedMs: lastEventMs(after, joinedAt, 'TARGET_COMMITTED'),
    releasedMs: lastEventMs(after, joinedAt, 'SHARDS_RELEASED'),
    assignedMs: lastEventMs(after, joinedAt, 'SHARDS_ASSIGNED'),
    heartbeats: counted,
    coordinatorCalls: counted + committed,
    scriptCalls: calls.scripts,
    publishes: calls.publishes,
    errors: errors - errorsBefore,
    steadyBurst,
  };
}

const fmt = (n: number) => (Number.isNaN(n) ? '—' : n < 10 ? n.toFixed(1) : n.toFixed(0));
const withRange = (s: Spread, unit = '') => `${fmt(s.median)}${unit} (${fmt(s.min)}–${fmt(s.max)})`;

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  const loadBefore = load();
  try {
    const version = await redisVersion(redis);
    progress(`redis-server ${version}; ${MEMBERS} members, ${SHARDS} shards, ${RUNS} runs; load average ${loadBefore}`);
    const runs: RebalanceRun[] = [];
    for (let i = 0; i < RUNS; i++) {
      const r = await run(server.url, i);
      runs.push(r);
      progress(
        `  run ${i + 1}: owned ${r.ownedMs.toFixed(1)} ms, reading ${r.readingMs.toFixed(1)} ms; committed +${r.committedMs}, released +${r.releasedMs}, assigned +${r.assignedMs} ms; ${r.heartbeats} heartbeats, ${r.coordinatorCalls} coordinator calls, ${r.scriptCalls} script calls, ${r.publishes} publishes, ${r.errors} errors`,
      );
    }
    const of = (pick: (r: RebalanceRun) => number) => spread(runs.map(pick));
    const section = [
      SECTION_4A,
      '',
      'Written by `npm run bench:rebalance` (`-- --members M --shards S --runs R`); do not edit by hand.',
      `${MEMBERS - 1} members (one process, one client, \`runtimeMaxConcurrency\` 4) own the ${SHARDS.toLocaleString('en-US')}`,
      'shards of a STABLE group; one more member starts. From its `start()`: **owned**, the group is STABLE',
      'with every shard owned and every member holding its share; **reading**, then an entry sent to each of',
      "the new member's shards has reached its handler. The phases come from the group's event log (Redis",
      'time, whole ms, from the join): the target committed, the last revocation released, the last shard',
      "assigned. Heartbeats: every member's heartbeat calls until **owned**; coordinator calls: those and the",
      "target commits; all script calls (the coordinator's, and the members' claims, takeovers, sweeps and",
      "reads' gap checks) and PUBLISHes from `INFO commandstats` over the same time.",
      '',
      `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}; Node ${process.version}, Redis ${version}.`,
      `${RUNS} runs: the median, with min–max in parentheses. Load average (1 / 5 / 15 min) at the start ${loadBefore}, at the end ${load()}`,
      '(2 cores: above 2, this process waits for a core and the times grow with the load).',
      `Before the first join, the STABLE group ran at most ${runs[0].steadyBurst.toLocaleString('en-US')} script calls in one ${STEADY_WINDOW_MS} ms window`,
      `(watched for ${STEADY_WATCH_MS / 1000} s, a sweep interval: the members' sweeps run in phases, not all at once).`,
      '',
      '| members | shards | owned | reading | committed | released | assigned | heartbeats | coordinator calls | all script calls | PUBLISHes |',
      '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
      `| ${MEMBERS} | ${SHARDS.toLocaleString('en-US')} | ${withRange(
        of((r) => r.ownedMs),
        ' ms',
      )} | ${withRange(
        of((r) => r.readingMs),
        ' ms',
      )} | ${withRange(
        of((r) => r.committedMs),
        ' ms',
      )} | ${withRange(
        of((r) => r.releasedMs),
        ' ms',
      )} | ${withRange(
        of((r) => r.assignedMs),
        ' ms',
      )} | ${withRange(of((r) => r.heartbeats))} | ${withRange(of((r) => r.coordinatorCalls))} | ${withRange(
        of((r) => r.scriptCalls),
      )} | ${withRange(of((r) => r.publishes))} |`,
      '',
    ].join('\n');
    spliceSection(SECTION_4A, section, { before: '## Latency' });
    progress('wrote section 4a of docs/benchmarks.md');
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

runCli(main);
