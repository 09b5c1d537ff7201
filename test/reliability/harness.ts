import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import { TcpProxy } from '../support/tcp-proxy';
import { check, type CheckReport, type Fault, type FaultKind, type Produced, type RecordLine } from './checker';

/** The member process entry point, built by `npm run build` (the test script builds first). */
const MEMBER_PROCESS = path.resolve(__dirname, '../../packages/core/dist/testing/member-process.js');

export const FAULT_KINDS: FaultKind[] = ['kill', 'pause', 'graceful', 'join', 'redis-restart', 'partition', 'reset'];

export interface HarnessOptions {
  seed: number;
  members?: number;
  shards?: number;
  sessionTimeoutMs?: number;
  /** Entries per second the producer writes (keyed, with per-key sequence numbers). */
  rate?: number;
  keys?: number;
  handlerDelayMs?: number;
  /** Progress lines (one per fault); default: none. */
  progress?: (line: string) => void;
}

/** A small, seeded PRNG (mulberry32): the same seed gives the same schedule and targets. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface MemberProcess {
  memberId: string;
  child: ChildProcess;
  proxy: TcpProxy;
  exited: Promise<void>;
  paused: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(description: string, probe: () => Promise<boolean> | boolean, timeoutMs: number, intervalMs = 25): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await sleep(intervalMs);
  }
}

/**
 * The reliability harness of issue 5: a private redis-server with AOF (`appendfsync always`),
 * member processes each behind a loopback TCP proxy, a producer of keyed entries in this process,
 * and faults injected on a seeded schedule. `finish()` stops the load, waits until everything
 * written has been handled, and runs the checker.
 */
export class ChaosHarness {
  readonly random: () => number;
  readonly faults: Fault[] = [];
  readonly dir: string;
  readonly streamPrefix = 'chaos';
  readonly consumerGroup = 'chaos-group';
  private readonly members = new Map<string, MemberProcess>();
  private readonly produced: Produced[] = [];
  private nextMember = 0;
  private producing = false;
  private producerLoop: Promise<void> | undefined;
  private redis!: Redis;
  private admin!: CoordinatorAdmin;
  private readonly settings: Required<Omit<HarnessOptions, 'progress'>>;
  private readonly progress: (line: string) => void;

  private constructor(
    readonly server: RedisServer,
    options: HarnessOptions,
  ) {
    this.settings = { members: 3, shards: 8, sessionTimeoutMs: 1000, rate: 500, keys: 50, handlerDelayMs: 1, ...options };
    this.progress = options.progress ?? (() => undefined);
    this.random = seededRandom(options.seed);
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-chaos-'));
  }

  static async start(options: HarnessOptions): Promise<ChaosHarness> {
    if (!fs.existsSync(MEMBER_PROCESS)) throw new Error(`${MEMBER_PROCESS} is missing: run npm run build first`);
    const server = await RedisServer.start({ persistence: 'aof' });
    const harness = new ChaosHarness(server, options);
    harness.redis = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    harness.redis.on('error', () => undefined);
    harness.admin = new CoordinatorAdmin(harness.redis);
    await harness.admin.createStream({ streamPrefix: harness.streamPrefix, shardCount: harness.settings.shards });
    await Promise.all(Array.from({ length: harness.settings.members }, () => harness.spawnMember()));
    await harness.waitUntilRecovered(30_000);
    harness.startProducing();
    return harness;
  }

  get liveMembers(): string[] {
    return [...this.members.values()].filter((m) => !m.paused).map((m) => m.memberId);
  }

  // ---- members --------------------------------------------------------------------------------

  private async spawnMember(): Promise<string> {
    const memberId = `p${this.nextMember++}`;
    const proxy = await TcpProxy.start(this.server.port);
    const settings = {
      url: proxy.url,
      streamPrefix: this.streamPrefix,
      consumerGroup: this.consumerGroup,
      memberId,
      recordFile: path.join(this.dir, `${memberId}.jsonl`),
      sessionTimeoutMs: this.settings.sessionTimeoutMs,
      heartbeatIntervalMs: Math.floor(this.settings.sessionTimeoutMs / 5),
      runtimeMaxConcurrency: 4,
      handlerDelayMs: this.settings.handlerDelayMs,
    };
    const child = spawn(process.execPath, [MEMBER_PROCESS], {
      env: { ...process.env, RSC_MEMBER_PROCESS: JSON.stringify(settings) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const member: MemberProcess = { memberId, child, proxy, exited, paused: false };
    this.members.set(memberId, member);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`member process ${memberId} not ready after 20 s`)), 20_000);
      child.stdout!.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`member process ${memberId} exited with ${code} before it was ready`));
      });
    });
    return memberId;
  }

  private async removeMember(memberId: string, signal: NodeJS.Signals): Promise<void> {
    const member = this.members.get(memberId)!;
    if (member.paused) member.child.kill('SIGCONT');
    member.child.kill(signal);
    await member.exited;
    await member.proxy.stop();
    this.members.delete(memberId);
  }

  private pick(): MemberProcess {
    const candidates = [...this.members.values()].filter((m) => !m.paused);
    return candidates[Math.floor(this.random() * candidates.length)];
  }

  // ---- load -----------------------------------------------------------------------------------

  private startProducing(): void {
    const connection = new Redis(this.server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    connection.on('error', () => undefined);
    const producer = new StreamProducer(connection, { streamPrefix: this.streamPrefix });
    const next = new Map<string, number>();
    const tickMs = 20;
    const perTick = Math.max(1, Math.round((this.settings.rate * tickMs) / 1000));
    this.producing = true;
    this.producerLoop = (async () => {
      let round = 0;
      while (this.producing) {
        const batch = Array.from({ length: perTick }, (_, i) => {
          const key = `key-${(round * perTick + i) % this.settings.keys}`;
          const seq = (next.get(key) ?? 0) + 1;
          next.set(key, seq);
          return { key, payload: { seq } };
        });
        round += 1;
        // A batch that fails (Redis restarting) is sent again until it goes through: the same
        // sequence numbers, so per-key order is still defined; a copy that did land is a duplicate
        // in the stream, not a gap.
        for (;;) {
          try {
            const results = await producer.sendBatch(batch);
            results.forEach((r, i) => this.produced.push({ id: r.id, shard: r.shardIndex, key: batch[i].key, seq: batch[i].payload.seq }));
            break;
          } catch {
            if (!this.producing) break;
            await sleep(50);
          }
        }
        await sleep(tickMs);
      }
      connection.disconnect();
    })();
  }

  // ---- faults ---------------------------------------------------------------------------------

  /** Injects one fault, then waits (bounded) until the group has recovered from it. */
  async inject(kind: FaultKind): Promise<Fault> {
    const fault: Fault = { kind, at: performance.timeOrigin + performance.now() };
    const started = performance.now();
    switch (kind) {
      case 'kill':
      case 'graceful': {
        // SIGKILL: a crash; SIGTERM: the member drains, acknowledges and leaves. A new one replaces it.
        const victim = this.pick();
        fault.target = victim.memberId;
        await this.removeMember(victim.memberId, kind === 'kill' ? 'SIGKILL' : 'SIGTERM');
        await this.spawnMember();
        break;
      }
      case 'join': {
        fault.target = await this.spawnMember();
        // Keep the group's size bounded: the oldest member leaves gracefully (recorded as such).
        if (this.members.size > this.settings.members + 1) {
          const oldest = [...this.members.keys()][0];
          this.faults.push({ kind: 'graceful', target: oldest, at: performance.timeOrigin + performance.now() });
          await this.removeMember(oldest, 'SIGTERM');
        }
        break;
      }
      case 'pause':
        // A zombie: stopped past its session, then woken up holding stale ownership.
        await this.isolate(fault, started, (m) => m.child.kill('SIGSTOP'), (m) => m.child.kill('SIGCONT'));
        break;
      case 'partition':
        // One member cut off from Redis (nothing delivered either way) past its session, then healed.
        await this.isolate(fault, started, (m) => m.proxy.freeze(), (m) => m.proxy.thaw());
        break;
      case 'reset': {
        // Every connection of one member reset at once.
        const victim = this.pick();
        fault.target = victim.memberId;
        victim.proxy.cut();
        break;
      }
      case 'redis-restart': {
        await this.server.restart('SIGKILL');
        break;
      }
    }
    await this.waitUntilRecovered(60_000);
    fault.recoveryMs ??= performance.now() - started;
    this.faults.push(fault);
    this.progress(`${kind}${fault.target ? ` ${fault.target}` : ''}: recovered in ${Math.round(fault.recoveryMs)} ms`);
    return fault;
  }

  /**
   * Cuts one member off (`cut`), waits until the others own its shards (the fault's recovery), one
   * session more, then lets it back (`heal`): it returns holding ownership that has moved on.
   */
  private async isolate(fault: Fault, started: number, cut: (m: MemberProcess) => void, heal: (m: MemberProcess) => void): Promise<void> {
    const victim = this.pick();
    fault.target = victim.memberId;
    victim.paused = true;
    cut(victim);
    await this.waitUntilRecovered(30_000);
    fault.recoveryMs = performance.now() - started;
    await sleep(this.settings.sessionTimeoutMs);
    heal(victim);
    victim.paused = false;
  }

  /** The group is STABLE and every shard is owned by a member that is running and reachable. */
  async waitUntilRecovered(timeoutMs: number): Promise<void> {
    await waitFor(
      'the group to be STABLE with every shard owned by a running member',
      async () => {
        try {
          const d = await this.admin.describeGroup(this.streamPrefix, this.consumerGroup);
          const live = new Set(this.liveMembers);
          return d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED' && s.owner !== null && live.has(s.owner));
        } catch {
          return false; // Redis restarting
        }
      },
      timeoutMs,
    );
  }

  // ---- the end --------------------------------------------------------------------------------

  /** Stops the load, waits until every entry written is handled, stops the members, checks. */
  async finish(drainTimeoutMs = 60_000): Promise<CheckReport> {
    this.producing = false;
    await this.producerLoop;
    const expected = this.produced.length;
    const outstanding = async () => {
      const open = await this.unacknowledged();
      return this.produced.filter((p) => open.has(`${p.shard}/${p.id}`)).length;
    };
    try {
      await waitFor(`${expected} entries handled and acknowledged`, async () => (await outstanding()) === 0, drainTimeoutMs, 100);
    } catch {
      // What is still outstanding is reported by the checker as lost.
    }
    await Promise.all([...this.members.keys()].map((id) => this.removeMember(id, 'SIGTERM')));
    return check(this.produced, this.records(), this.faults, await this.unacknowledged());
  }

  /** "shard/id" of every entry the group has not acknowledged: pending, or after its last-delivered id. */
  private async unacknowledged(): Promise<Set<string>> {
    const outstanding = new Set<string>();
    for (let shard = 0; shard < this.settings.shards; shard++) {
      const stream = this.admin.keys.shardStream(this.streamPrefix, shard);
      const mine = findGroupInfo(await this.redis.xinfo('GROUPS', stream).catch(() => []), this.consumerGroup);
      for (const [id] of await this.redis.xrange(stream, `(${mine?.lastDelivered ?? '0-0'}`, '+')) outstanding.add(`${shard}/${id}`);
      if (mine) {
        for (const entry of (await this.redis.xpending(stream, this.consumerGroup, '-', '+', 1_000_000)) as [string][]) outstanding.add(`${shard}/${entry[0]}`);
      }
    }
    return outstanding;
  }

  records(): RecordLine[] {
    const lines: RecordLine[] = [];
    for (const file of fs.readdirSync(this.dir)) {
      for (const line of fs.readFileSync(path.join(this.dir, file), 'utf8').split('\n')) {
        // A process killed mid-write may leave a torn last line; it was never acknowledged to anyone.
        if (line.trim() === '') continue;
        try {
          lines.push(JSON.parse(line) as RecordLine);
        } catch {
          /* torn line */
        }
      }
    }
    return lines;
  }

  async stop(): Promise<void> {
    this.producing = false;
    await this.producerLoop?.catch(() => undefined);
    for (const member of this.members.values()) {
      member.child.kill('SIGCONT');
      member.child.kill('SIGKILL');
      await member.exited;
      await member.proxy.stop();
    }
    this.members.clear();
    this.redis.disconnect();
    await this.server.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
