import fs from 'node:fs';
import path from 'node:path';
import { pairs } from '../../packages/core/src/redis/responses';
import { TcpProxy } from '../support/tcp-proxy';
import type { Fault, FaultKind } from './checker';
import { failingSpell, groupKeysLost, revokeTwice, trimHistory, unsafeLease, whatItDid, zombieDeadLetter } from './fault-scenarios';
import { failover, slotMove } from './cluster-faults';
import { resize, staleWrites } from './resize-faults';
import type { ChaosHarness } from './harness';
import { type MemberProcess, proxyOf, sleep, waitFor } from './harness-tools';
import { longHandlerStarted, RecordTail } from './record-tail';
import { evalsha, scriptShas } from './script-match';
import { freezeOnStop, halfOpen, lateAnswers, lateJoin } from './seam-faults';
import { deleteRacingResizeBack, resetOffsets } from './operation-faults';
import { purgeDeadLetters, replayDeadLetters } from './dead-letter-faults';
import { staticRestart } from './static-restart';
import { transportActors } from './transport-actors';
import type { TargetKind } from './target';

/** The process-level and resizing kinds, which need no proxy: on both targets. */
const BOTH: readonly TargetKind[] = ['single', 'cluster'];

export interface FaultSpec {
  what: string;
  /** The fix this fault kind checks (a commit and what it changed): the code before it failed the run. */
  needs?: string;

  /**
   * Where it can be made (default: the single redis-server only). A cluster has no proxies (its
   * nodes announce their own ports) and no one server to restart or reconfigure, so the kinds that
   * act on a member's connection or on the server run on the single node only.
   */
  runsOn?: readonly TargetKind[];
  // biome-ignore lint/suspicious/noConfusingVoidType: most kinds return nothing (Promise<void>), a few the time the fault was lifted
  inject(h: ChaosHarness, fault: Fault): Promise<{ liftedAt?: number } | void>;
}

/**
 * Delays one member's requests by `requestMs` and its replies by `replyMs` (plus up to `jitterMs`
 * per chunk each way) for `holdMs`, then makes them fast again.
 */
async function latency(h: ChaosHarness, fault: Fault, requestMs: number, replyMs: number, jitterMs: number, holdMs: number) {
  const victim = h.pick();
  fault.target = victim.memberId;
  h.excuse(victim, holdMs + h.sessionTimeoutMs * 3);
  proxyOf(victim).delay('request', Math.round(requestMs), Math.round(jitterMs / 2));
  proxyOf(victim).delay('reply', Math.round(replyMs), Math.round(jitterMs / 2));
  await sleep(holdMs);
  proxyOf(victim).clearFaults();
  return { liftedAt: performance.now() };
}

/** Lets one request of one member reach Redis and drops its reply (bounded wait for such a request). */
async function lostReply(h: ChaosHarness, fault: Fault, match: (request: string) => boolean, quietMs = 0) {
  const victim = h.pick();
  fault.target = victim.memberId;
  const dropped = proxyOf(victim).dropNextReply(match);
  const timeout = sleep(10_000).then(() => 'timeout' as const);
  if ((await Promise.race([dropped, timeout])) === 'timeout') {
    proxyOf(victim).clearFaults();
    // Nothing was dropped, so nothing to recover from: said in the report, not counted as a failure.
    // (A member that stopped sending altogether is caught by the recovery check that follows: every
    // running member process must be a member of its group.)
    fault.detail = '(not injected: no matching request in 10 s)';
    return { liftedAt: performance.now() };
  }
  // The member is not to blame for the reconnect itself; what it must do afterwards is its job.
  h.excuse(victim, 300);
  if (quietMs > 0) {
    h.load.quiet(quietMs);
    h.staleLoad.quiet(quietMs);
    await sleep(quietMs);
  }
  return { liftedAt: performance.now() };
}

/** Dead-letter keys of both layouts: one stream per group, or one per shard and group. */
function deadLetterKeys(h: ChaosHarness): string[] {
  const keys: string[] = [];
  // Read by shape: the per-group layout is gone since dead letters moved into each shard's slot
  // (da4f26b, SPEC 9.2), the per-shard one new then.
  const layout = h.admin.keys as unknown as { deadLetterStream?: (prefix: string, group: string) => string };
  for (const group of h.groups) {
    if (layout.deadLetterStream) keys.push(layout.deadLetterStream(h.streamPrefix, group));
    for (let shard = 0; shard < h.maxShards; shard++) keys.push(`${h.admin.keys.shardStream(h.streamPrefix, shard)}:dead-letter:${group}`);
  }
  return keys;
}

/** Replaces a key by a string, keeping a stream that was there aside; `restore` undoes it, atomically. */
const BLOCK_KEY = `
if redis.call('TYPE', KEYS[1]).ok == 'stream' then redis.call('RENAME', KEYS[1], KEYS[2]) end
redis.call('SET', KEYS[1], 'chaos: not a stream')
return 1`;
const RESTORE_KEY = `
if redis.call('TYPE', KEYS[1]).ok == 'string' then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[1]) end
return 1`;

/** maxmemory (noeviction) `deltaBytes` above what Redis uses now (negative: every write refused at once). */
async function limitMemory(h: ChaosHarness, deltaBytes: number): Promise<void> {
  const info = await h.redis.info('memory');
  const used = Number(/used_memory:(\d+)/.exec(info)![1]);
  await h.redis.config('SET', 'maxmemory-policy', 'noeviction');
  await h.redis.config('SET', 'maxmemory', String(Math.max(1024 * 1024, used + deltaBytes)));
}

/** Replaces one member of the first group (graceful stop, new process with `clockOffsetMs`). */
async function replace(h: ChaosHarness, fault: Fault, signal: NodeJS.Signals, clockOffsetMs?: number): Promise<void> {
  const victim = h.pickAnyGroup();
  fault.target = victim.memberId;
  await h.removeMember(victim.handle, signal);
  // A process of the first group is followed by the next kind in turn; the deferring group's by its own kind.
  await h.spawnMember(victim.group === h.consumerGroup ? { clockOffsetMs } : { clockOffsetMs, group: victim.group, kind: victim.kind });
}

export const FAULTS: Record<FaultKind, FaultSpec> = {
  kill: {
    runsOn: BOTH,
    what: '`SIGKILL` of a member process; a new one is started',
    inject: (h, f) => replace(h, f, 'SIGKILL'),
  },
  graceful: {
    runsOn: BOTH,
    what: '`SIGTERM`: the member drains, acknowledges and leaves; a new one is started',
    inject: (h, f) => replace(h, f, 'SIGTERM'),
  },
  join: {
    runsOn: BOTH,
    what: 'a new member process joins (the oldest leaves gracefully when there are more than four)',
    async inject(h, fault) {
      fault.target = (await h.spawnMember()).memberId;
      const first = h.firstGroupMembers();
      if (first.length > h.settings.members + 1) {
        h.faults.push({ kind: 'graceful', target: first[0].memberId, at: performance.timeOrigin + performance.now() });
        await h.removeMember(first[0].handle, 'SIGTERM');
      }
    },
  },
  pause: {
    runsOn: BOTH,
    what: '`SIGSTOP` until the others own its shards, one session more, then `SIGCONT`: a zombie holding stale ownership',
    inject: (h, f) =>
      h.isolate(
        f,
        (m) => m.child.kill('SIGSTOP'),
        (m) => m.child.kill('SIGCONT'),
      ),
  },
  partition: {
    what: "the member's proxy stops forwarding both ways until the others own its shards, one session more, then heals",
    inject: (h, f) =>
      h.isolate(
        f,
        (m) => proxyOf(m).freeze(),
        (m) => proxyOf(m).thaw(),
      ),
  },
  reset: {
    what: 'every connection of one member reset at once',
    async inject(h, fault) {
      const victim = h.pick();
      fault.target = victim.memberId;
      h.excuse(victim, 500);
      proxyOf(victim).cut();
    },
  },
  'redis-restart': {
    what: '`SIGKILL` of redis-server, restarted on the same port and AOF (nothing lost)',
    async inject(h, fault) {
      h.excuse(undefined, 5000);
      const started = performance.now();
      await h.server.restart('SIGKILL');
      // Redis's own restart (loading the AOF) is not the library's recovery: reported apart.
      fault.target = `redis ready after ${Math.round(performance.now() - started)} ms`;
      return { liftedAt: performance.now() };
    },
  },
  'latency-low': {
    what: "one member's requests and replies each delayed by an eighth of the session timeout (a quarter round trip) for two sessions",
    inject: (h, f) => latency(h, f, h.sessionTimeoutMs / 8, h.sessionTimeoutMs / 8, 0, h.sessionTimeoutMs * 2),
  },
  'latency-session': {
    what:
      "one member's replies delayed by 0.28-0.32 session for four sessions: its heartbeats land in time (no expiry) but their answers are late, " +
      'so its lease looks unsafe at times, while 30% of entries fail every attempt and back off',
    // Meant for a retry dropped while the lease looks unsafe (fixed in da4f26b; unsafe-lease catches
    // it), but it did not strand an
    // entry on the code before the fix in three runs: it runs in the default tier as a latency case.
    async inject(h, f) {
      failingSpell(h);
      try {
        // Below the heartbeat's own timeout (a third of the session), so heartbeats succeed and the
        // member is not expired, yet their answers come late enough that the lease looks unsafe.
        return await latency(h, f, 0, h.sessionTimeoutMs * 0.28, h.sessionTimeoutMs * 0.08, h.sessionTimeoutMs * 4);
      } finally {
        failingSpell(h);
      }
    },
  },
  'latency-beyond': {
    what: "one member's requests and replies each delayed by a session for three sessions: it is expired, the others take its shards while its replies crawl",
    inject: (h, f) => latency(h, f, h.sessionTimeoutMs, h.sessionTimeoutMs, 0, h.sessionTimeoutMs * 3),
  },
  jitter: {
    what: 'up to a third of the session timeout of random delay per packet (each way, in order), for two sessions',
    inject: (h, f) => latency(h, f, 0, 0, (h.sessionTimeoutMs * 2) / 3, h.sessionTimeoutMs * 2),
  },
  'lost-read': {
    what: 'an `XREADGROUP` reaches Redis, its reply (the entries) is dropped; then no writes for 7 s (quiet shards)',
    needs: 'da4f26b: the owner recovers its own pending entries',
    inject: (h, f) => lostReply(h, f, TcpProxy.command('XREADGROUP'), 7000),
  },
  'lost-ack': {
    what: 'an acknowledgement script runs, its reply is dropped',
    inject: (h, f) => lostReply(h, f, evalsha(scriptShas('ack'))),
  },
  'lost-heartbeat': {
    what: 'a heartbeat script runs, its reply is dropped',
    inject: (h, f) => lostReply(h, f, evalsha(scriptShas('heartbeat'))),
  },
  'dead-letter-wrongtype': {
    what: 'every dead-letter stream replaced by a string (WRONGTYPE) for 2 s while handlers fail part of the time',
    needs: 'da4f26b: a failed dead-letter write no longer strands the entry',
    async inject(h) {
      const keys = deadLetterKeys(h);
      // A shard whose dead letter cannot be written waits (in order) until it can: no one's fault.
      h.excuse(undefined, 2000 + h.sessionTimeoutMs * 2);
      for (const key of keys) await h.redis.eval(BLOCK_KEY, 2, key, `${key}:chaos-saved`);
      failingSpell(h);
      try {
        await sleep(2000);
      } finally {
        failingSpell(h);
        for (const key of keys) await h.redis.eval(RESTORE_KEY, 2, key, `${key}:chaos-saved`);
      }
      return { liftedAt: performance.now() };
    },
  },
  'dead-letter-oom': {
    what: '`maxmemory` below the memory in use (noeviction) for 0.6 session while 30% of entries fail every attempt: every write, dead letters included, gets OOM',
    needs: 'da4f26b: a failed dead-letter write no longer strands the entry',
    async inject(h) {
      h.excuse(undefined, h.sessionTimeoutMs * 4);
      // Failing entries first, so that many are in their retries (due to be dead-lettered) when
      // memory runs out; out of memory for less than the lease budget, so heartbeats failing for
      // that long do not hand the shards (and their stranded entries) to a new grant.
      failingSpell(h);
      await sleep(300);
      await limitMemory(h, -1024 * 1024);
      try {
        await sleep(h.sessionTimeoutMs * 0.6);
      } finally {
        await h.redis.config('SET', 'maxmemory', '0');
        failingSpell(h);
      }
      return { liftedAt: performance.now() };
    },
  },
  'partial-batch': {
    what: '`maxmemory` just above the memory in use for two seconds: a producer batch fails part-way (OOM) and is retried as documented',
    needs: 'd998fcf: per-entry sendBatch results (SPEC 9.5)',
    async inject(h) {
      h.excuse(undefined, h.sessionTimeoutMs * 4);
      await limitMemory(h, 16 * 1024);
      try {
        await sleep(2000);
      } finally {
        await h.redis.config('SET', 'maxmemory', '0');
      }
      return { liftedAt: performance.now() };
    },
  },
  'long-graceful': {
    runsOn: BOTH,
    what: 'handlers of one member start taking 1.5 sessions, then it is stopped gracefully (it must keep its lease while it drains)',
    needs: 'e52e2f2: heartbeats during stop',
    async inject(h, fault) {
      const victim = h.pick();
      fault.target = victim.memberId;
      h.excuse(victim, 60_000);
      const tail = new RecordTail(victim.recordFile);
      victim.child.kill('SIGUSR1');
      try {
        await waitFor('a long handler to start', () => longHandlerStarted(tail), 20_000).catch((error: Error) => {
          throw new Error(`${error.message} (${whatItDid(victim)})`);
        });
      } finally {
        // Stopped gracefully whether or not a long handler was seen: a member left with long handlers
        // would work through its shards at one entry per 1.5 s for the rest of the run.
        await h.removeMember(victim.handle, 'SIGTERM');
        await h.spawnMember();
      }
    },
  },
  'grow-ordered': { runsOn: BOTH, what: 'one shard more, ordered cutover', inject: (h, f) => resize(h, f, true, true) },
  'grow-unordered': { runsOn: BOTH, what: 'one shard more, no ordering', inject: (h, f) => resize(h, f, true, false) },
  'shrink-ordered': { runsOn: BOTH, what: 'one shard fewer, ordered cutover', inject: (h, f) => resize(h, f, false, true) },
  'shrink-unordered': { runsOn: BOTH, what: 'one shard fewer, no ordering', inject: (h, f) => resize(h, f, false, false) },
  'new-group': {
    runsOn: BOTH,
    what: 'two ordered growths, then (the first time) a consumer group created (two member processes): it must read the whole history in per-key order',
    needs: '2c8e506: a new group crosses every recorded resize, not only the latest',
    async inject(h, fault) {
      const current = (await h.admin.describeStream(h.streamPrefix))!.shardCount;
      if (current > 8) {
        // An unordered shrink of its own, recorded as such: the checker excuses the inversions it allows.
        const shrink: Fault = { kind: 'shrink-unordered', at: fault.at };
        const { liftedAt } = await resize(h, shrink, false, false);
        await h.waitUntilRecovered(h.cutoverBoundMs());
        shrink.recoveryMs = performance.now() - liftedAt;
        h.faults.push(shrink);
      }
      const first = { ...fault };
      await resize(h, first, true, true);
      await resize(h, { ...fault }, true, true);
      // Two processes per group on a two-core machine: a long soak stops adding groups at two. Each
      // group handles every entry written (1,100/s); with a third, the machine ran out of CPU: the
      // third group's two processes read about 600 entries/s each, never caught up with its history,
      // and every ordered resize waited for it past its bound (the soaks of a7497d4 and 4549efb).
      if (h.groups.length >= 2) {
        fault.target = `no new group (two already: ${h.groups.join(', ')})`;
        return;
      }
      const group = `late-${h.groups.length}`;
      // Retention first, keeping from 5 s before the first growth was made: the group reads that (and
      // crosses every resize of the history), not the soak's whole backlog.
      // Retention paused until the group exists: what it was told it can read stays.
      await h.pauseRetention();
      try {
        const trimmed = await trimHistory(h, Date.now() - first.at + 5000);
        for (const entry of await h.trimmedAway()) trimmed.add(entry);
        fault.target = group;
        fault.detail = `(${trimmed.size} older entries trimmed first)`;
        h.addGroup(group, trimmed);
        await Promise.all([h.spawnMember({ group }), h.spawnMember({ group })]);
      } finally {
        h.resumeRetention();
      }
    },
  },
  'delete-drained': {
    what: "an ordered shrink with a producer's writes held in flight (as stale-producer), then `deleteDrainedShards` as soon as it is allowed, then the writes land",
    needs: 'd998fcf, dcd863d: writes refused once their shard stopped taking writes; deleteDrainedShards re-checks (SPEC 9.5)',
    async inject(h, fault) {
      return staleWrites(h, fault, async () => {
        let deleted: number[] = [];
        let refusal = 'none';
        await waitFor(
          'deleteDrainedShards to be allowed',
          async () => {
            try {
              deleted = await h.admin.deleteDrainedShards(h.streamPrefix);
              return true;
            } catch (error) {
              if ((error as Error).name !== 'ResizeInProgressError') throw error;
              refusal = (error as Error).message;
              return false;
            }
          },
          30_000,
          100,
        ).catch(async (error: Error) => {
          // Why it was not allowed: what a NOT RECOVERED line needs to be read, with what the shard it
          // names holds (its length and ends, each group's last-delivered id and pending: a group
          // missing there counts the whole stream as undelivered).
          const shard = /removed shard (\d+)/.exec(refusal)?.[1];
          const holds = shard === undefined ? '' : `; shard ${shard} holds ${await shardHoldings(h, Number(shard))}`;
          throw new Error(`${error.message}; its last refusal: ${refusal}${holds}`);
        });
        h.shardsDeleted(deleted);
        fault.target += ` deleted [${deleted.join(',')}]`;
      });
    },
  },
  'stale-producer': {
    what: "a producer's writes held in flight (its connection frozen) across an ordered shrink and twice its `graceMs` after it",
    needs: 'd998fcf, dcd863d: writes refused once their shard stopped taking writes (SPEC 9.5)',
    inject: (h, fault) => staleWrites(h, fault, () => sleep(2000)),
  },
  'redis-flush-restart': {
    what: '`SIGKILL` of redis-server and a restart with its files deleted: every key lost; the members must recreate the group (no operator)',
    needs: 'e52e2f2: recovery after FLUSHALL, tokens that do not regress (SPEC 9.3)',
    async inject(h, fault) {
      h.excuse(undefined, 10_000);
      await h.server.kill('SIGKILL');
      fault.at = performance.timeOrigin + performance.now();
      fault.dataLoss = true;
      for (const file of fs.readdirSync(h.server.dir)) fs.rmSync(path.join(h.server.dir, file), { recursive: true, force: true });
      await h.server.restart();
      return { liftedAt: performance.now() };
    },
  },
  'clock-skew': {
    runsOn: BOTH,
    what: 'a member replaced by one whose wall clock is 3 hours off (ahead or behind, by the seed)',
    async inject(h, fault) {
      const offset = (h.random() < 0.5 ? -1 : 1) * 3 * 3_600_000;
      await replace(h, fault, 'SIGTERM', offset);
      fault.target += ` (${offset > 0 ? '+' : '-'}3 h)`;
    },
  },
  'unsafe-lease': {
    what:
      'a member replaced by one with a 3-session timeout and heartbeats every 1.5 sessions, whose heartbeats (only) are then held 0.9 session at its proxy for two heartbeat cycles ' +
      'while 30% of entries fail every attempt but the last: they land in time, but their answers come so late that the lease looks unsafe 0.9 s in every 2.4 s, while retries fall due',
    needs: 'da4f26b: a retry due while the lease looks unsafe waits for it',
    inject: unsafeLease,
  },
  'zombie-dead-letter': {
    runsOn: BOTH,
    what:
      "a member's handlers turn long (1.5 sessions) while 30% of entries fail every attempt; it is paused during the last attempt of one until the others own its shards " +
      '(the new owner dead-letters and acknowledges that entry), then resumed: its own dead letter of it must be refused',
    needs: 'da4f26b: dead letters fenced like acknowledgements (SPEC 9.2)',
    inject: zombieDeadLetter,
  },
  'revoke-twice': {
    runsOn: BOTH,
    what:
      'a side group of scripted members: one (rebalanceTimeoutMs 2 s) is asked for a revocation, then 1 s later for another; it acknowledges the first at 1.5 s and the second 1.5 s ' +
      'after it was asked: it must stay a member',
    needs: 'e52e2f2: each revocation has its own deadline',
    inject: revokeTwice,
  },
  'group-keys-lost': {
    runsOn: BOTH,
    what:
      "epochs raised (visitors join and leave), then the group's coordinator keys deleted, shards and fencing tokens kept: the members rejoin, the group is recreated " +
      'at low epochs, and every shard must be read again within 10 s',
    needs: 'e52e2f2: fencing tokens carry the group incarnation (SPEC 9.3)',
    inject: groupKeysLost,
  },
  'duplicate-id': {
    runsOn: BOTH,
    what: "a second process started with a live member's id: it must be refused for good (FENCED_INSTANCE_ID) within 10 s",
    needs: 'e52e2f2: one live process per member id (SPEC 9.4)',
    async inject(h, fault) {
      const original = h.pick();
      fault.target = original.memberId;
      h.excuse(original, 15_000);
      const twin = await h.spawnMember({ memberId: original.memberId, kind: original.kind, twin: true, waitReady: false });
      const started = performance.now();
      try {
        const tail = new RecordTail(twin.recordFile, true);
        await waitFor('the second process to be refused', () => refused(twin, tail), 10_000, 50);
        fault.recoveryMs = performance.now() - started;
      } finally {
        await h.removeMember(twin.handle, 'SIGKILL');
      }
    },
  },
  'late-answers': {
    what:
      "one member's answers (every connection) come half a session late, its requests on time, for 1.6 owned-but-unread bounds: its heartbeats land but it never waits long enough " +
      'for their answers; every shard must be read within the bound meanwhile (Redis expires it, the others read its shards)',
    needs: '411d408 (seams-a): late heartbeat answers, Redis and the member agree on whether it is alive (SPEC 10.2)',
    inject: lateAnswers,
  },
  'late-join': {
    what: 'a new member joins over a link whose answers come half a session late from its first byte: no shard may be revoked to it and left unread; it joins once the link is fast',
    needs: '411d408 (seams-a): a member joining over a late link is not made a member (SPEC 10.2)',
    inject: lateJoin,
  },
  'half-open-commands': {
    what: 'a member (resetStuckConnection) whose command connection goes half-open (no answer, no close) at a heartbeat: it must reset it, every shard read within the bound, and say so in stats().problems',
    needs: 'resetStuckConnection: the command connection reset after two unanswered heartbeats (SPEC 10.1)',
    inject: (h, f) => halfOpen(h, f, 'commands'),
  },
  'half-open-reads': {
    what: 'a member reading alone whose blocking-read connection goes half-open: the read counts as lost, the connection is reset, every shard read within the bound, and a problems line',
    needs: 'the reader connection reset after a read that never comes back (SPEC 10.1)',
    inject: (h, f) => halfOpen(h, f, 'reads'),
  },
  'half-open-acks': {
    what:
      'a member with ackWaitForReplicas (acks on a connection of their own) whose ack connection goes half-open at a WAIT: acks are bounded, the connection is reset, ' +
      'every finished entry acknowledged, every shard read within the bound, and a problems line while it lasts',
    needs: '233280b (seams-a): acknowledgements bounded and their own connection watched (SPEC 10.1)',
    inject: (h, f) => halfOpen(h, f, 'acks'),
  },
  'half-open-wake': {
    what: 'a member joins with its wake-up subscriber connection half-open from its first SUBSCRIBE: start() must not hang on it, the subscriber is watched and listed in problems, every shard read within the bound',
    needs: '5a20215 (seams-a): the wake-up subscriber is watched (SPEC 10.1)',
    inject: (h, f) => halfOpen(h, f, 'wake'),
  },
  'freeze-on-stop': {
    what: "a member's acknowledgement held at its proxy, the network then frozen both ways and the member sent SIGTERM: stop() must return within its documented bound",
    needs: '233280b (seams-a): stop() no longer waits on a stuck ack (SPEC 10.1)',
    inject: freezeOnStop,
  },
  'reset-offsets': {
    what:
      "the first group's offsets reset with `force` while its members run, to the earliest retained entry (one time in three) or to 2 s ago, retention trimming on: " +
      'everything after the reset point must be handled again (those runs are no duplicates)',
    needs: 'c48b97d (seams-d): trim keeps what a reset asked to re-read; bf4913b: each shard re-checked in its slot (SPEC 10.5)',
    inject: resetOffsets,
  },
  'delete-resize-back': {
    what: 'an ordered shrink to its end, then `deleteDrainedShards` and an ordered growth back to the former count at once: the shard brought back must lose nothing written to it',
    needs: 'ca46873 (seams-d): each shard deleted in its own slot after a re-check; a resize back never loses entries (SPEC 10.5)',
    inject: deleteRacingResizeBack,
  },
  'dead-letter-replay': {
    what:
      "an operator's replay of up to three of the first group's dead letters, on a connection of its own, with a fault between two of its steps (the delete fails, " +
      "the write's or the delete's reply is lost with its connection, the write lands late after another replay took the mark over, a trim after the write " +
      'or between two replays), tried again until done: each dead letter replayed exactly once or still listed, each replay handled',
    needs: '28333f2: replay records outlive their dead letter as tombstones, so a late replay write cannot land twice (SPEC 10.6)',
    inject: replayDeadLetters,
  },
  'dead-letter-purge': {
    what:
      "an operator's purge of up to three of the first group's dead letters, with a fault between its steps (the delete fails or its reply is lost), some after " +
      'a replay of it stopped before its delete or while a replay write is on a slow link, tried again until done: gone, replayed at most once, a later replay finds it gone',
    inject: purgeDeadLetters,
  },
  transport: {
    what: 'a Nest server (RedisStreamsServer) and client (CoordinatorClientProxy) process, each behind its own proxy: delays both ways, a reply held past the client timeout, a reply lost on each side, a half-open connection on each side, and requests forged to reply into keys that are no inbox',
    inject: transportActors,
  },
  'static-restart': {
    what:
      "a static member's process replaced by its next instance (same memberInstanceId) inside its session: after a graceful stop, a crash with the next instance " +
      'already asking to join, or a pause while a long handler runs (the old instance then resumes: its acknowledgement must be refused); back in time, it owns the shards it had',
    needs:
      'e953609: static membership in the coordinator, the next instance takes over with a new epoch that fences the old one (SPEC 9.4)',
    inject: staticRestart,
  },
  failover: {
    runsOn: ['cluster'],
    what:
      "`SIGKILL` of the master serving a shard's slot (one time in three the coordinator's), chosen by the seed: its replica takes over, then the old master " +
      'restarts as its replica; sends and acks wait for a replica, so nothing confirmed may be lost',
    inject: failover,
  },
  'slot-move': {
    runsOn: ['cluster'],
    what: "a shard stream's slot (one time in four the coordinator's) moved to another master while members run, one key at a time with MIGRATE (ASK, TRYAGAIN, then MOVED)",
    inject: slotMove,
  },
};

/** The process exited, or said it was refused as a second instance of a live member. */
async function refused(member: MemberProcess, tail: RecordTail): Promise<boolean> {
  if (member.child.exitCode !== null) return true;
  return tail.read().some((l) => l.e === 'error' && /FENCED_INSTANCE_ID|instance/i.test(l.msg ?? ''));
}

/** A shard stream's length, first and last ids, and each group's last-delivered id and pending count, in one line. */
async function shardHoldings(h: ChaosHarness, shard: number): Promise<string> {
  const stream = h.admin.keys.shardStream(h.streamPrefix, shard);
  try {
    const [length, first, last, groups] = await Promise.all([
      h.redis.xlen(stream),
      h.redis.xrange(stream, '-', '+', 'COUNT', 1),
      h.redis.xrevrange(stream, '+', '-', 'COUNT', 1),
      h.redis.xinfo('GROUPS', stream) as Promise<unknown[]>,
    ]);
    const described = groups.map((group) => {
      const fields: Record<string, unknown> = group instanceof Map ? Object.fromEntries(group) : Object.fromEntries(pairs(group));
      return `${String(fields.name)} at ${String(fields['last-delivered-id'])} (pending ${String(fields.pending)})`;
    });
    return `${length} entries (${first[0]?.[0] ?? '-'} .. ${last[0]?.[0] ?? '-'}), groups: ${described.join(', ') || 'none'}`;
  } catch (error) {
    return `(not read: ${(error as Error).message})`;
  }
}
