import type { CoordinatorFigures } from './coordinator-bench';
import type { Spread } from './stats';

export interface MemberFigures {
  total: number;
  runs: number;
  raw: Spread;
  member: Spread;
  ratio: Spread;
  latency: { p50: number; p99: number; samples: number };
  rebalanceMs: { members: number; shards: number; ms: Spread }[];
}

export interface Environment {
  date: string;
  cpus: string;
  memoryGiB: number;
  node: string;
  redis: string;
  ioredis: string;
  quick: boolean;
}

const us = (n: number) => `${n.toFixed(1)} µs`;
const ms = (n: number) => `${n.toFixed(n < 1 ? 3 : 1)} ms`;
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;

function verdict(value: number, limit: number): string {
  return value < limit ? 'met' : `**missed** (${value.toFixed(1)} ≥ ${limit})`;
}

/** docs/benchmarks.md: the machine, then one table per measurement, then the targets. */
export function coordinatorReport(env: Environment, figures: CoordinatorFigures[]): string {
  const at = (members: number) => figures.find((f) => f.members === members);
  const hundred = at(100);
  const thousand = at(1000);
  const lines = [
    '# Benchmarks',
    '',
    'Written by `npm run bench` (`npm run bench -- --quick` for a smoke run). Do not edit by hand.',
    '',
    `Measured ${env.date} on ${env.cpus}, ${env.memoryGiB} GiB; Node ${env.node}, Redis ${env.redis}, ioredis ${env.ioredis}.` +
      (env.quick ? ' **Quick run: fewer samples.**' : ''),
    '',
    '## Coordinator cost',
    '',
    'Groups of M members with 10 shards per member, on a private `redis-server` on loopback. Redis time is',
    'the `usec` per call of `EVALSHA` (and `EVAL`) from `INFO commandstats`, reset before each phase: the time the',
    'script holds Redis. Round trip (RTT) is measured by the client around each call, one call at a time.',
    '',
    row(['members', 'shards', 'steady heartbeat: Redis', 'RTT p50', 'RTT p99', 'join: Redis', 'join RTT p50', 'join RTT p99', 'commit: Redis', 'commit RTT']),
    row(Array(10).fill('---')),
    ...figures.map((f) =>
      row([
        f.members,
        f.shards,
        `${us(f.steadyHeartbeat.redisUsPerCall)} (${f.steadyHeartbeat.redisUsSpread.min.toFixed(1)}–${f.steadyHeartbeat.redisUsSpread.max.toFixed(1)})`,
        ms(f.steadyHeartbeat.rttP50Ms),
        ms(f.steadyHeartbeat.rttP99Ms),
        us(f.join.redisUsPerCall),
        ms(f.join.rttP50Ms),
        ms(f.join.rttP99Ms),
        `${ms(f.commit.redisUsPerCall / 1000)} (${(f.commit.redisUsSpread.min / 1000).toFixed(1)}–${(f.commit.redisUsSpread.max / 1000).toFixed(1)})`,
        ms(f.commit.rttMs),
      ]),
    ),
    '',
    'Redis times are the median of the repetitions, with min–max in parentheses. ' +
      'Steady state: every member heartbeats in turn in a STABLE group, 3 repetitions ' +
      `(${figures.map((f) => f.steadyHeartbeat.calls).join(' / ')} calls in all). Join: a new member's first heartbeat ` +
      '(epoch 0), without the target computation it triggers. Commit: the compare-and-set of a full target ' +
      `after one member joined or left (median of ${figures[0]?.commit.samples} commits), including the move of the ` +
      'unaffected members to the new epoch.',
    '',
    '## Assignor',
    '',
    'The sticky assignor alone, in Node (median of 10 runs).',
    '',
    row(['members', 'shards', 'fresh group', 'one member joins a balanced group']),
    row(Array(4).fill('---')),
    ...figures.map((f) => row([f.members, f.shards, ms(f.assignorMs.fresh), ms(f.assignorMs.scaleOut)])),
    '',
    '## Targets',
    '',
    row(['target', 'measured', 'verdict']),
    row(['---', '---', '---']),
    hundred ? row(['steady heartbeat < 50 µs Redis time at 100 members / 1,000 shards', us(hundred.steadyHeartbeat.redisUsPerCall), verdict(hundred.steadyHeartbeat.redisUsPerCall, 50)]) : '',
    thousand ? row(['assignor < 50 ms for 1,000 members / 10,000 shards', ms(Math.max(thousand.assignorMs.fresh, thousand.assignorMs.scaleOut)), verdict(Math.max(thousand.assignorMs.fresh, thousand.assignorMs.scaleOut), 50)]) : '',
    thousand ? row(['commit < 10 ms Redis time for 1,000 members / 10,000 shards', ms(thousand.commit.redisUsPerCall / 1000), verdict(thousand.commit.redisUsPerCall / 1000, 10)]) : '',
    '',
  ];
  return lines.filter((line, i, all) => line !== '' || all[i - 1] !== '').join('\n');
}

const rate = (s: Spread) => `${Math.round(s.median).toLocaleString('en-US')}/s (${Math.round(s.min).toLocaleString('en-US')}–${Math.round(s.max).toLocaleString('en-US')})`;
const msSpread = (s: Spread) => `${ms(s.median)} (${s.min.toFixed(1)}–${s.max.toFixed(1)})`;

/** The member runtime's section: throughput against the raw limit, latency, rebalance time. */
export function memberReport(f: MemberFigures): string {
  const sixteen = f.rebalanceMs.find((r) => r.members === 16);
  const lines = [
    '',
    '## Member runtime',
    '',
    `### Throughput: no-op handler, ${f.total.toLocaleString('en-US')} pre-filled entries, 8 shards, one member`,
    '',
    'Against the raw limit: one connection running `XREADGROUP COUNT 100` over the same 8 streams and a',
    'pipelined `XACK` per batch, on the same Redis, in the same run. The member runs 8 workers (one per',
    'shard), batch size 100, and is timed from `start()` (join included) to its last acknowledgement.',
    `Median and min–max of ${f.runs} run(s).`,
    '',
    row(['raw XREADGROUP/XACK loop', 'CoordinatedMember', 'member / raw']),
    row(['---', '---', '---']),
    row([rate(f.raw), rate(f.member), `${(f.ratio.median * 100).toFixed(0)} % (${(f.ratio.min * 100).toFixed(0)}–${(f.ratio.max * 100).toFixed(0)} %)`]),
    '',
    '### Latency at a steady 5,000 entries/s',
    '',
    'From `send` to the handler starting, same process, 8 shards, one member with 8 workers; the first',
    `tenth of the run is left out as warm-up (${f.latency.samples.toLocaleString('en-US')} samples).`,
    '',
    row(['p50', 'p99']),
    row(['---', '---']),
    row([ms(f.latency.p50), ms(f.latency.p99)]),
    '',
    '### Rebalance after a join',
    '',
    'N - 1 members own 4 shards each; time from the N-th member\'s `start()` until the group is STABLE',
    `with every shard owned and every member holding its 4 shards. Median and min–max of ${f.runs} run(s).`,
    '',
    row(['members', 'shards', 'rebalance']),
    row(['---', '---', '---']),
    ...f.rebalanceMs.map((r) => row([r.members, r.shards, msSpread(r.ms)])),
    '',
    '### Targets',
    '',
    row(['target', 'measured', 'verdict']),
    row(['---', '---', '---']),
    row(['throughput ≥ 80 % of the raw limit', `${(f.ratio.median * 100).toFixed(0)} %`, f.ratio.median >= 0.8 ? 'met' : `**missed** (${(f.ratio.median * 100).toFixed(0)} % < 80 %)`]),
    row(['p99 latency < 10 ms at 5,000 entries/s', ms(f.latency.p99), verdict(f.latency.p99, 10)]),
    sixteen ? row(['rebalance < 100 ms for 16 members on loopback', ms(sixteen.ms.median), verdict(sixteen.ms.median, 100)]) : '',
    '',
  ];
  return lines.join('\n');
}
