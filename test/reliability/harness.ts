import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CoordinatorAdmin, type RedisClient, type TrimSchedule } from '@redis-stream-coordinator/core';
import type { RedisCluster, RedisServer } from '@redis-stream-coordinator/core/testing';
import type { MemberProcessSettings } from '../../packages/core/src/testing/member-process';
import { check, type CheckReport, type Fault, type FaultKind, type PendingSample, type RecordLine } from './checker';
import { FAULTS } from './faults';
import { LoadProducer } from './load';
import {
  mustBeOwned,
  pendingSamples,
  readDeadLetters,
  replayWritesInStreams,
  type RetainedFrom,
  retainedFrom,
  trimmedAway,
  unacknowledged,
} from './redis-state';
import type { DeadLetterOperations, TransportEpisode } from './records';
import { kindSettings, MEMBER_KINDS, type MemberKind } from './member-kinds';
import { abandonWaits, type MemberProcess, proxyOf, readRecords, readyOf, seededRandom, sleep, waitFor } from './harness-tools';
import { whoDidWhat } from './member-report';
import { ChaosTarget, type TargetKind } from './target';
import type { TcpProxy } from '../support/tcp-proxy';

export { mustBeOwned, proxyOf, readRecords, seededRandom, sleep, waitFor, type MemberProcess };

/** The member process entry point, built by `npm run build` (the test script builds first). */
const MEMBER_PROCESS = path.resolve(__dirname, '../../packages/core/dist/testing/member-process.js');

export interface HarnessOptions {
  seed: number;
  /**
   * One redis-server (default), or a Redis Cluster of 3 masters and 3 replicas (docs/reliability-cluster.md): no proxies
   * there, so only the fault kinds that need none run (`FaultSpec.runsOn`); sends and acks wait for a
   * replica unless `waitForReplicas` is false.
   */
  target?: TargetKind;
  waitForReplicas?: boolean;
  members?: number;
  shards?: number;
  sessionTimeoutMs?: number;
  /** Entries per second the main producer writes (keyed, with per-key sequence numbers). */
  rate?: number;
  keys?: number;
  handlerDelayMs?: number;
  /**
   * Key-ordered lanes of every member process (default 1): with more, a member runs that many keys
   * of a shard at once, and the checker holds it to per-key order (no two runs of a key at once).
   */
  lanes?: number;
  /**
   * Every member process runs a second, idle member on the same client (member-process.ts
   * `companion`), so the chaos member reads through its ReadHub's shared path (the doorbell and the
   * shared read connection) instead of alone with a blocking read. Default false.
   */
  sharedReads?: boolean;
  /** Handler failures (member-process.ts): first attempts failing, and entries failing every attempt. */
  failPercent?: number;
  deadPermille?: number;
  /**
   * Retention as an operator runs it: `admin.startTrimming` on this interval for the whole run (0:
   * none). Default RSC_CHAOS_RETENTION_MS or 500 ms. The checker counts what was trimmed before every
   * group handled it (`trimmedUnhandled`: must be none).
   */
  retentionMs?: number;
  /**
   * Member processes of every kind (member-kinds.ts), each new one the next kind in turn (default
   * true; RSC_CHAOS_MEMBER_KINDS=0 runs plain members only).
   */
  memberKinds?: boolean;
  /**
   * A second consumer group from the start (DEFERRED_GROUP, two member processes of the `deferred`
   * kind: `retryMode: 'deferred'`, deferredOrder 'key'): its handlers' failures are deferred and its
   * keys' later entries parked behind them. A group of its own because members of one group must
   * agree on retryMode (docs/runtime.md, Deferred retries: a member retrying in place parks nothing).
   * Default false (RSC_CHAOS_DEFERRED=1 or 0 overrides; the soak turns it on).
   */
  deferredGroup?: boolean;
  /**
   * Every how-manyth key of the main producer is delayed, each with a constant `delayMs` of its own
   * (load.ts, delayedMsOf); 0: none. Default 10 (RSC_CHAOS_DELAYED_EVERY overrides).
   */
  delayedEvery?: number;
  /** Progress lines (one per fault); default: none. */
  progress?: (line: string) => void;
}

/** The deferring group's name (`HarnessOptions.deferredGroup`). */
export const DEFERRED_GROUP = 'chaos-deferred';

/** Member processes of the deferring group (replaced one for one when a kill or a graceful stop hits one). */
const DEFERRED_MEMBERS = 2;

type Settings = Required<Omit<HarnessOptions, 'progress' | 'target' | 'waitForReplicas'>>;

export interface SpawnOptions {
  memberId?: string;
  group?: string;
  clockOffsetMs?: number;
  /** Wait for "ready" (default); false for a process that may rightly be refused. */
  waitReady?: boolean;
  /** This member's session timeout (default: the harness's) and heartbeat interval (default: a fifth of it). */
  sessionTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  /** Member options a fault kind needs on its victim: acks on their own connection, stuck connections reset, a companion (shared reads). */
  ackWaitForReplicas?: { replicas: number; timeoutMs: number };
  resetStuckConnection?: boolean;
  companion?: boolean;
  /** Called with the member's new proxy before the process starts (a link that is faulty from the first byte). */
  onProxy?: (proxy: TcpProxy) => void;
  /** Its kind (default: the next in turn, or plain when the run has one kind). */
  kind?: MemberKind;
  /** With `memberId`: a second live process with that id (duplicate-id), not the member's next instance (a static restart). */
  twin?: boolean;
}

const wallNow = () => performance.timeOrigin + performance.now();

/** Whether a member process has neither exited nor been killed. */
const running = (member: MemberProcess) => member.child.exitCode === null && member.child.signalCode === null;

/**
 * Every harness of this process not yet stopped. A run can end without reaching its own `stop()` (a
 * test that timed out leaves its lanes running, a start that failed half way has no harness to give
 * back): `stopAll` stops these, and the exit hook below kills their member processes, so no process
 * the harness started outlives the test process (redis-servers: RedisServer's own exit hook).
 */
const liveHarnesses = new Set<ChaosHarness>();

process.once('exit', () => {
  for (const harness of liveHarnesses) harness.killMembersNow();
});

/** The main producer writing nothing for this long is a stall (its longest pauses on purpose: 7 s of quiet; a Redis restart or failover: a few s). */
const PRODUCER_STALL_MS = 20_000;

/** How long a member process may take to join (print "ready") before it counts as failed to start. */
const MEMBER_READY_MS = 20_000;

/**
 * The reliability harness (docs/reliability.md): a private redis-server with AOF (`appendfsync always`),
 * member processes each behind a loopback TCP proxy, producers of keyed entries in this process (one
 * of them behind a proxy too, to be made stale), a sampler of what sits pending, and faults injected
 * on a seeded schedule (faults.ts). With `target: 'cluster'` the same runs on a Redis
 * Cluster of 3 masters and 3 replicas, without proxies (target.ts; docs/reliability-cluster.md).
 * `finish()` stops the load, waits until everything written has
 * been handled, and runs the checker.
 */
export class ChaosHarness {
  readonly random: () => number;
  readonly faults: Fault[] = [];
  readonly dir: string;
  readonly streamPrefix = 'chaos';
  readonly consumerGroup = 'chaos-group';
  /** Every consumer group (the first, and those created mid-run reading the whole history). */
  readonly groups: string[] = [this.consumerGroup];
  /** "shard/id" of entries in shard streams that `deleteDrainedShards` deleted (after every group then had read them). */
  readonly deleted = new Set<string>();
  /** Per group created mid-run: the entries deleted before it existed, which it cannot read. */
  readonly unreadable = new Map<string, Set<string>>();
  readonly members = new Map<string, MemberProcess>();
  readonly settings: Settings;
  /** The most shards the stream has had (every one is scanned at the end). */
  maxShards: number;
  /** Resizes made so far (a group created now crosses each of them). */
  resizes = 0;
  redis!: RedisClient;
  admin!: CoordinatorAdmin;
  load!: LoadProducer;
  /** A producer behind its own proxy, writing keys of its own: the stale-producer fault freezes it. */
  staleLoad!: LoadProducer;
  /** No fault may blame a member for pending work until then (performance.now()): Redis-wide faults. */
  excusedUntil = 0;
  private nextMember = 0;
  private nextKind = 0;
  /** Every member id spawned so far and its kind (removed processes included). */
  private readonly kindsSeen = new Map<string, MemberKind>();
  private readonly progress: (line: string) => void;
  private readonly samples: PendingSample[] = [];
  /** Times the main producer wrote nothing for PRODUCER_STALL_MS, with why (a broken promise the report shows). */
  readonly producerStalls: string[] = [];
  private sampling: Promise<void> | undefined;
  private stopped = false;
  /** Set by `stop()`: no member process may be started any more (a fault still running after a test timed out). */
  private closed = false;
  private stopping: Promise<void> | undefined;
  /** Keep the record files after `stop()` (a lane whose check failed), as RSC_CHAOS_KEEP=1 does for every run. */
  keepRecords = false;
  /** The retention schedule (`retentionMs`), while it runs; failed runs so far (Redis restarting, out of memory). */
  private retention: TrimSchedule | undefined;
  trimFailures = 0;
  /** The stream's `resizeHistory` when the run drained (JSON), kept with the records. */
  private resizeHistory: string | undefined;
  /** What the dead-letter replay and purge actors saw and asked for (dead-letter-faults.ts). */
  readonly deadLetterOperations: DeadLetterOperations = { seen: [], replayAsked: new Set(), purgeAsked: new Set(), answered: new Map() };
  /** What the Nest transport's actors recorded, one episode per transport fault (transport-actors.ts). */
  readonly transportEpisodes: TransportEpisode[] = [];

  private constructor(
    readonly target: ChaosTarget,
    options: HarnessOptions,
  ) {
    this.settings = {
      // On a cluster a replica takes over 2.2-3.5 s after its master died (cluster-node-timeout 1 s, then the election): the
      // session outlasts it, as docs/cluster.md advises, so members keep their leases through one.
      members: 3,
      shards: 8,
      sessionTimeoutMs: target.kind === 'cluster' ? 3000 : 1000,
      rate: 500,
      keys: 50,
      handlerDelayMs: 1,
      failPercent: 3,
      deadPermille: 5,
      // RSC_CHAOS_MEMBER_LANES=n runs every member with key-ordered lanes.
      lanes: Math.max(1, Number(process.env.RSC_CHAOS_MEMBER_LANES ?? 1) || 1),
      sharedReads: false,
      retentionMs: Math.max(0, Number(process.env.RSC_CHAOS_RETENTION_MS ?? 500) || 0),
      memberKinds: process.env.RSC_CHAOS_MEMBER_KINDS !== '0',
      deferredGroup: false,
      delayedEvery: 10,
      ...options,
    };
    const env = process.env;
    if (env.RSC_CHAOS_DEFERRED === '0' || env.RSC_CHAOS_DEFERRED === '1') this.settings.deferredGroup = env.RSC_CHAOS_DEFERRED === '1';
    if (env.RSC_CHAOS_DELAYED_EVERY !== undefined) this.settings.delayedEvery = Math.max(0, Number(env.RSC_CHAOS_DELAYED_EVERY) || 0);
    this.maxShards = this.settings.shards;
    this.progress = options.progress ?? (() => undefined);
    this.random = seededRandom(options.seed);
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-chaos-'));
    liveHarnesses.add(this);
  }

  /**
   * Stops every harness of this process not yet stopped (each keeps its record files: a run that
   * ends so did not finish), after ending every wait their faults are in (`abandonWaits`): for a
   * test's way out whatever happened to it (a timeout included), after which nothing of the harness
   * may keep running.
   */
  static async stopAll(reason: string): Promise<void> {
    abandonWaits(reason);
    const harnesses = [...liveHarnesses];
    for (const harness of harnesses) if (!harness.stopping) harness.keepRecords = true;
    await Promise.all(harnesses.map((harness) => harness.stop()));
  }

  static async start(options: HarnessOptions): Promise<ChaosHarness> {
    if (!fs.existsSync(MEMBER_PROCESS)) throw new Error(`${MEMBER_PROCESS} is missing: run npm run build first`);
    const target = await ChaosTarget.start(options.target ?? 'single', { waitForReplicas: options.waitForReplicas });
    const harness = new ChaosHarness(target, options);
    try {
      await harness.begin();
    } catch (error) {
      // Half started: what it started so far must not outlive the failure.
      harness.keepRecords = true;
      await harness.stop();
      throw error;
    }
    return harness;
  }

  /** Everything `start` does once the target runs: the stream, retention, the members, the load, the sampler. */
  private async begin(): Promise<void> {
    this.redis = this.target.connect();
    this.admin = new CoordinatorAdmin(this.redis);
    await this.admin.createStream({ streamPrefix: this.streamPrefix, shardCount: this.settings.shards });
    this.resumeRetention();
    await Promise.all(Array.from({ length: this.settings.members }, () => this.spawnMember()));
    if (this.settings.deferredGroup) {
      this.addGroup(DEFERRED_GROUP);
      await Promise.all(Array.from({ length: DEFERRED_MEMBERS }, () => this.spawnMember({ group: DEFERRED_GROUP, kind: 'deferred' })));
    }
    await this.waitUntilRecovered(30_000);
    this.load = await LoadProducer.start(this, {
      keyPrefix: 'key',
      keys: this.settings.keys,
      rate: this.settings.rate,
      viaProxy: false,
      delayedEvery: this.settings.delayedEvery,
    });
    // Batches of 20 keys every 200 ms: a batch held in flight has an entry for nearly every shard.
    this.staleLoad = await LoadProducer.start(this, {
      keyPrefix: 'stale',
      keys: 40,
      rate: 100,
      tickMs: 200,
      keysPerBatch: 20,
      viaProxy: true,
    });
    this.sampling = this.samplePending();
  }

  /** The single redis-server (fault kinds that restart it or change its config); throws on a cluster. */
  get server(): RedisServer {
    return this.target.server;
  }

  /** The Redis Cluster (failover, slot-move); throws on a single server. */
  get cluster(): RedisCluster {
    return this.target.cluster;
  }

  get sessionTimeoutMs(): number {
    return this.settings.sessionTimeoutMs;
  }

  /** Member processes of a group that may own shards now (running, not cut off). */
  liveMembers(group = this.consumerGroup): string[] {
    return [...this.members.values()].filter((m) => m.group === group && !m.isolated).map((m) => m.memberId);
  }

  /**
   * Member processes the harness did not remove that are gone (crashed): still counted as running
   * above (a crash is not a recovery), named in the reason a wait ran out.
   */
  deadMembers(): string[] {
    return [...this.members.values()]
      .filter((m) => !running(m))
      .map((m) => `${m.handle} (${m.child.exitCode !== null ? `exited ${m.child.exitCode}` : `killed ${m.child.signalCode}`})`);
  }

  /** Records that `shards` were deleted: what was written to them is gone for groups created later. */
  shardsDeleted(shards: number[]): void {
    const gone = new Set(shards);
    for (const p of [...this.load.produced, ...this.staleLoad.produced]) if (gone.has(p.shard)) this.deleted.add(`${p.shard}/${p.id}`);
  }

  /** A group is created now: it must read the whole history, except what was deleted or trimmed before. */
  addGroup(group: string, trimmed: Set<string> = new Set()): void {
    this.groups.push(group);
    this.unreadable.set(group, new Set([...this.deleted, ...trimmed]));
  }

  /**
   * Starts retention (the operator's periodic trim) unless it is off or running. A fault that creates
   * a group pauses it meanwhile: a trim between the harness's look at what is left and the group's
   * creation would take entries the new group is told it can read.
   */
  resumeRetention(): void {
    if (this.settings.retentionMs <= 0 || this.retention || this.stopped) return;
    this.retention = this.admin.startTrimming(this.streamPrefix, { intervalMs: this.settings.retentionMs });
    this.retention.on('error', () => (this.trimFailures += 1));
  }

  async pauseRetention(): Promise<void> {
    const retention = this.retention;
    this.retention = undefined;
    await retention?.stop();
  }

  /** "shard/id" of the entries written so far that are gone from their shard stream now (redis-state.ts). */
  async trimmedAway(): Promise<Set<string>> {
    return trimmedAway(this, [...this.load.produced, ...this.staleLoad.produced]);
  }

  /** Where a shard stream's retained entries begin (redis-state.ts). */
  async retainedFrom(shard: number): Promise<RetainedFrom | undefined> {
    return retainedFrom(this, shard);
  }

  /** Keeps pending work at `member` (or everywhere) excused for `ms` more: it is under a fault. */
  excuse(member: MemberProcess | undefined, ms: number): void {
    const until = performance.now() + ms;
    if (member) member.excusedUntil = Math.max(member.excusedUntil, until);
    else this.excusedUntil = Math.max(this.excusedUntil, until);
  }

  // ---- members --------------------------------------------------------------------------------

  async spawnMember(options: SpawnOptions = {}): Promise<MemberProcess> {
    if (this.closed) throw new Error('the harness was stopped: no member process is started any more');
    const number = this.nextMember++;
    const memberId = options.memberId ?? `p${number}`;
    const handle = options.memberId ? `${memberId}-${options.twin ? 'twin' : 'r'}${number}` : memberId;
    const group = options.group ?? this.consumerGroup;
    const kind = options.kind ?? (this.settings.memberKinds ? MEMBER_KINDS[this.nextKind++ % MEMBER_KINDS.length] : 'plain');
    const kindOptions = kindSettings(kind, this.settings.lanes);
    const proxy = await this.target.proxy();
    const session = options.sessionTimeoutMs ?? this.settings.sessionTimeoutMs;
    const recordFile = path.join(this.dir, `${handle}.jsonl`);
    const settings: MemberProcessSettings = {
      ...this.target.memberConnection(proxy),
      streamPrefix: this.streamPrefix,
      consumerGroup: group,
      memberId,
      handle,
      recordFile,
      sessionTimeoutMs: session,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? Math.floor(session / 5),
      runtimeMaxConcurrency: 4 * (kindOptions.lanes ?? 1),
      ...kindOptions,
      companion: options.companion ?? this.settings.sharedReads,
      resetStuckConnection: options.resetStuckConnection,
      handlerDelayMs: this.settings.handlerDelayMs,
      // After Redis loses every key the members recreate the stream (no operator).
      shardCount: this.settings.shards,
      sweepIntervalMs: 500,
      maxAttempts: 3,
      // Long enough that a retry often falls due while a late heartbeat answer makes the lease look unsafe.
      retryBackoffMs: 100,
      // Long handlers (SIGUSR1) outlive the session; a graceful stop must still let them finish.
      longHandlerMs: Math.round(this.settings.sessionTimeoutMs * 1.5),
      shutdownTimeoutMs: session * 4,
      rebalanceTimeoutMs: session * 5,
      failPercent: this.settings.failPercent,
      deadPermille: this.settings.deadPermille,
      clockOffsetMs: options.clockOffsetMs,
    };
    if (options.ackWaitForReplicas) settings.ackWaitForReplicas = options.ackWaitForReplicas;
    if (proxy) options.onProxy?.(proxy);
    // Stopped while its proxy started: nothing is spawned (stop() has already swept the members).
    if (this.closed) {
      await proxy?.stop();
      throw new Error('the harness was stopped: no member process is started any more');
    }
    const child = spawn(process.execPath, [MEMBER_PROCESS], {
      env: { ...process.env, RSC_MEMBER_PROCESS: JSON.stringify(settings) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const member: MemberProcess = {
      handle,
      memberId,
      group,
      kind,
      twin: options.twin ?? false,
      ready: Promise.resolve(),
      child,
      proxy,
      exited,
      isolated: false,
      excusedUntil: 0,
      recordFile,
    };
    this.members.set(handle, member);
    this.kindsSeen.set(memberId, kind);
    const ready = readyOf(child, `member process ${handle}`, recordFile, MEMBER_READY_MS);
    member.ready = ready;
    if (options.waitReady === false) ready.catch(() => undefined);
    else await ready;
    return member;
  }

  async removeMember(handle: string, signal: NodeJS.Signals): Promise<void> {
    const member = this.members.get(handle);
    if (!member) return;
    if (member.isolated) member.child.kill('SIGCONT');
    member.child.kill(signal);
    await member.exited;
    await member.proxy?.stop();
    this.members.delete(handle);
  }

  /**
   * A kill's or a graceful stop's victim: with the deferring group on, one time in three one of its
   * processes (its deferrals and parked keys must survive the handoff), else `pick()`.
   */
  pickAnyGroup(): MemberProcess {
    const deferring = [...this.members.values()].filter((m) => m.group === DEFERRED_GROUP && !m.twin && !m.isolated);
    if (deferring.length > 0 && this.random() < 1 / 3) return deferring[Math.floor(this.random() * deferring.length)];
    return this.pick();
  }

  /** A running member of the first group, not cut off, chosen by the seed. */
  pick(): MemberProcess {
    const candidates = this.firstGroupMembers().filter((m) => !m.isolated);
    return candidates[Math.floor(this.random() * candidates.length)];
  }

  /** The first group's member processes, the oldest first, without duplicate-id twins. */
  firstGroupMembers(): MemberProcess[] {
    return [...this.members.values()].filter((m) => m.group === this.consumerGroup && !m.twin);
  }

  records(): RecordLine[] {
    const lines: RecordLine[] = [];
    for (const file of fs.readdirSync(this.dir)) {
      if (!file.endsWith('.jsonl')) continue;
      // One by one: a long soak's file has millions of lines, more than a spread's arguments may be.
      for (const line of readRecords(path.join(this.dir, file))) lines.push(line);
    }
    return lines;
  }

  /**
   * How long a resize may wait for the previous one, and for every group's cutover: a group created
   * mid-run crosses every resize of the history one cutover at a time (docs/resharding.md), reading
   * the backlog as it goes, so the bound grows with the resizes so far and with late groups.
   */
  cutoverBoundMs(): number {
    // A group created mid-run also reads the whole backlog before its last cutover completes, and
    // every resize waits for it (one resize at a time): allow it the time to catch up.
    const catchingUp = this.lateGroups() > 0 ? 150_000 : 0;
    return 30_000 + 1_000 * this.resizes + catchingUp;
  }

  /** Groups created mid-run (by the new-group fault), which read the whole history. */
  lateGroups(): number {
    return this.groups.filter((g) => g !== this.consumerGroup && g !== DEFERRED_GROUP).length;
  }

  // ---- faults ---------------------------------------------------------------------------------

  /** Injects one fault, then waits (bounded) until every group has recovered from it. */
  async inject(kind: FaultKind): Promise<Fault> {
    const fault: Fault = { kind, at: wallNow() };
    const started = performance.now();
    let lifted = started;
    try {
      const result = await FAULTS[kind].inject(this, fault);
      lifted = result?.liftedAt ?? performance.now();
      // A fault is in effect until it is lifted: runs begun meanwhile may be redelivered because of
      // it (a group's keys deleted well after the fault began raising its epochs, a partition while
      // the member still starts what it had buffered).
      fault.until ??= performance.timeOrigin + lifted;
      await this.waitUntilRecovered(this.cutoverBoundMs());
      fault.recoveryMs ??= performance.now() - lifted;
    } catch (error) {
      // The group did not come back (or the fault could not be made): a broken promise the report shows,
      // with what each member process did meanwhile (the diagnosis, without a rerun).
      fault.failed ??= (error as Error).message;
      fault.until ??= performance.timeOrigin + performance.now();
      fault.members = await whoDidWhat(this, fault.at).catch((failure: Error) => [`(who did what: ${failure.message})`]);
    }
    this.faults.push(fault);
    this.progress(
      `${kind}${fault.target ? ` ${fault.target}` : ''}${fault.detail ? ` ${fault.detail}` : ''}: ${fault.failed ? `NOT RECOVERED: ${fault.failed}` : `recovered in ${Math.round(fault.recoveryMs!)} ms`} (${Math.round(performance.now() - started)} ms in all)` +
        (fault.members ?? []).map((line) => `\n      ${line}`).join(''),
    );
    return fault;
  }

  /**
   * Cuts one member off (`cut`), waits until the others own its shards (the fault's recovery), one
   * session more, then lets it back (`heal`): it returns holding ownership that has moved on.
   */
  async isolate(fault: Fault, cut: (m: MemberProcess) => void, heal: (m: MemberProcess) => void, victim = this.pick()): Promise<void> {
    const started = performance.now();
    fault.target = victim.memberId;
    victim.isolated = true;
    cut(victim);
    try {
      await this.waitUntilRecovered(30_000);
      fault.recoveryMs = performance.now() - started;
      await sleep(this.settings.sessionTimeoutMs);
    } finally {
      heal(victim);
      victim.isolated = false;
      this.excuse(victim, this.settings.sessionTimeoutMs * 3);
    }
  }

  /**
   * Every group is STABLE, every shard owned by a member that is running and reachable, and every
   * running, reachable member process a member of its group again (one that stays out of it, wedged,
   * would quietly take no work for the rest of the run).
   */
  async waitUntilRecovered(timeoutMs: number): Promise<void> {
    let why = '';
    await waitFor(
      `every group (${this.groups.join(', ')}) STABLE with every shard owned by a running member and every running member in its group`,
      async () => {
        try {
          const dead = this.deadMembers();
          for (const group of this.groups) {
            const d = await this.admin.describeGroup(this.streamPrefix, group);
            const live = new Set(this.liveMembers(group));
            const read = d.shards.filter(mustBeOwned);
            // In it means ACTIVE and proven: a LEFT or EXPIRED record, or a join never proven, is a
            // member that takes no work (one whose every heartbeat had become a leave looked "in" so).
            const out = [...live].filter(
              (id) => !d.members.some((m) => m.memberId === id && m.state === 'ACTIVE' && m.unprovenSince === null),
            );
            why = `${group}: ${d.group.state}; shards not owned by a running member: [${read
              .filter((s) => !(s.state === 'OWNED' && s.owner !== null && live.has(s.owner)))
              .map((s) => s.shardIndex)
              .join(
                ',',
              )}]; running but not in the group (ACTIVE, proven): [${out.join(',')}]${dead.length > 0 ? `; gone by themselves: [${dead.join(', ')}]` : ''}`;
            if (
              d.group.state !== 'STABLE' ||
              !read.every((s) => s.state === 'OWNED' && s.owner !== null && live.has(s.owner)) ||
              out.length > 0
            )
              return false;
          }
          return true;
        } catch (error) {
          why = `describeGroup failed: ${(error as Error).message}`;
          return false; // Redis restarting, or the group not (yet) recreated
        }
      },
      timeoutMs,
      50,
    ).catch((error: Error) => {
      throw new Error(`${error.message} (${why})`);
    });
  }

  // ---- what sits pending ------------------------------------------------------------------------

  /**
   * Every 250 ms: per group and shard, the entries pending for over a second and at whom, with the
   * shard's owner and whether that owner has any excuse (a fault on it or on Redis). The checker
   * finds stuck entries in these.
   */
  private async samplePending(): Promise<void> {
    let stalled = false;
    while (!this.stopped) {
      await sleep(250);
      // The main producer must keep writing (the stale one is held on purpose at times): a send
      // that never answers, or one refused for good, would starve every shard without a word.
      const stall = this.load.stalled(PRODUCER_STALL_MS);
      if (stall && !stalled) {
        this.producerStalls.push(`at ${new Date().toISOString()}: ${stall}`);
        this.progress(`PRODUCER STALLED: ${stall}`);
      }
      stalled = stall !== undefined;
      try {
        this.samples.push(...(await pendingSamples(this)));
      } catch {
        // Redis restarting or out of memory: the next sample tries again; streaks break on the gap.
      }
    }
  }

  // ---- the end --------------------------------------------------------------------------------

  /** Stops the load, waits until every entry written is handled by every group, stops the members, checks. */
  async finish(drainTimeoutMs = 60_000): Promise<CheckReport> {
    return (await this.drainAndStop(drainTimeoutMs))();
  }

  /**
   * `finish()` but for the check itself, returned to run later: the short tier runs harnesses side
   * by side in one process and checks once all are done, so that no checker's CPU burst holds up
   * another harness's proxies (and so its members' heartbeats).
   */
  async drainAndStop(drainTimeoutMs = 60_000): Promise<() => CheckReport> {
    await Promise.all([this.load.stop(), this.staleLoad.stop()]);
    const produced = [...this.load.produced, ...this.staleLoad.produced];
    // Dead letters' replays (dead-letter-faults.ts) are written too, and must be handled as well.
    const expected = [...produced, ...(await replayWritesInStreams(this).catch(() => []))];
    const written = new Set(expected.map((p) => `${p.shard}/${p.id}`));
    const outstanding = async () => {
      const open = await unacknowledged(this);
      // Delayed entries and deferred retries wait in schedules, and come out with ids of their own
      // (released, copies): everything in the stream must be acknowledged, every schedule empty.
      let waiting = 0;
      for (const g of this.groups) {
        const d = await this.admin.describeGroup(this.streamPrefix, g).catch(() => undefined);
        // Not answered (Redis restarting): not drained yet.
        waiting += d ? d.group.scheduled + d.group.deferred + d.group.parked : 1;
      }
      const others = [...open].filter((entry) => !written.has(entry.slice(entry.indexOf('/') + 1))).length;
      return expected.filter((p) => this.groups.some((g) => open.has(`${g}/${p.shard}/${p.id}`))).length + others + waiting;
    };
    try {
      await waitFor(
        `${expected.length} entries handled and acknowledged by every group`,
        async () => (await outstanding()) === 0,
        drainTimeoutMs,
        100,
      );
    } catch {
      // What is still outstanding is reported by the checker as lost.
    }
    this.stopped = true;
    await this.sampling;
    await this.pauseRetention();
    const trimmedAway = await this.trimmedAway();
    if (this.settings.retentionMs > 0) this.progress(`retention: ${trimmedAway.size} entries trimmed, ${this.trimFailures} runs failed`);
    await Promise.all([...this.members.keys()].map((handle) => this.removeMember(handle, 'SIGTERM')));
    const open = await unacknowledged(this);
    const deadLetters = await readDeadLetters(this);
    const replayWrites = await replayWritesInStreams(this);
    // For the evidence of an order violation only: if Redis cannot answer, the report goes without it.
    const resizeHistory =
      (await this.redis.hget(this.admin.keys.streamMeta(this.streamPrefix), 'resizeHistory').catch(() => null)) ?? undefined;
    this.resizeHistory = resizeHistory;
    return () =>
      check(produced, this.records(), this.faults, open, {
        deadLetters,
        pendingSamples: this.samples,
        // The sweep interval (500 ms) plus a margin for retries, backoff and a busy machine; the
        // sampler only sees entries idle for over a second, so these are on top of that second.
        // Entries queued behind one still being retried wait their turn: only the longer bound.
        stuckAfterMs: 2500,
        quietStuckAfterMs: 5000,
        groups: this.groups,
        unreadable: this.unreadable,
        lanes: (member) => (kindSettings(this.kindsSeen.get(member) ?? 'plain', this.settings.lanes).lanes ?? 1) > 1,
        memberKinds: this.settings.memberKinds || this.settings.deferredGroup ? this.kindsSeen : undefined,
        deferringGroups: this.settings.deferredGroup ? [DEFERRED_GROUP] : [],
        mayBeTwice: new Set([...this.load.mayBeTwice, ...this.staleLoad.mayBeTwice]),
        producerStalls: this.producerStalls,
        resizeHistory,
        trimmedAway,
        deadLetterOperations: this.deadLetterOperations,
        replayWrites,
        transportEpisodes: this.transportEpisodes,
      });
  }

  /**
   * Stops everything this harness started, whatever state it is in (half started, a fault still
   * running, a test that timed out): retention, the load, the sampler, every member process (SIGKILL,
   * after SIGCONT for one paused), every proxy, the target. Calling it again returns the same promise.
   */
  stop(): Promise<void> {
    this.stopping ??= this.stopNow();
    return this.stopping;
  }

  private async stopNow(): Promise<void> {
    this.stopped = true;
    this.closed = true;
    try {
      await this.pauseRetention();
      await Promise.all([this.load?.stop(), this.staleLoad?.stop(), this.sampling]);
    } finally {
      this.killMembersNow();
      await Promise.all([...this.members.values()].map((member) => member.exited));
      this.members.clear();
      this.redis?.disconnect();
      await this.target.stop();
      liveHarnesses.delete(this);
    }
    // RSC_CHAOS_KEEP=1 keeps the member processes' record files, to look into a run; a lane whose
    // check failed keeps them too. Beside them: what each write returned, the faults, the resize history.
    if (process.env.RSC_CHAOS_KEEP || this.keepRecords) {
      const produced = [...(this.load?.produced ?? []), ...(this.staleLoad?.produced ?? [])];
      fs.writeFileSync(path.join(this.dir, 'produced.json'), JSON.stringify(produced));
      fs.writeFileSync(path.join(this.dir, 'faults.json'), JSON.stringify(this.faults));
      fs.writeFileSync(path.join(this.dir, 'resize-history.json'), this.resizeHistory ?? 'null');
      process.stderr.write(`record files kept in ${this.dir}\n`);
    } else fs.rmSync(this.dir, { recursive: true, force: true });
  }

  /** SIGKILL to every member process still running (SIGCONT first: a paused one dies too); synchronous, for the exit hook. */
  killMembersNow(): void {
    for (const member of this.members.values()) {
      if (member.child.exitCode !== null || member.child.signalCode !== null) continue;
      member.child.kill('SIGCONT');
      member.child.kill('SIGKILL');
    }
  }
}
