/**
 * Fault kinds (cf74f32) that each reproduce a runtime defect the first fault model missed: a retry
 * dropped while the lease looks unsafe (`unsafe-lease`), an unfenced dead letter from a member whose
 * shard moved (`zombie-dead-letter`), a second revocation inheriting the first one's deadline
 * (`revoke-twice`), fencing tokens regressing after a group's keys were
 * lost (`group-keys-lost`). Each was run alone against the code before the fixes (docs/reliability.md
 * says what the checker reported) and is clean on the fixed code. Registered in faults.ts.
 */
import { CoordinatorClient, compareStreamIds, ErrorCode, type HeartbeatResponse } from '@redis-stream-coordinator/core';
import { ProtocolMember } from '@redis-stream-coordinator/core/testing';
import { heldFrom, readGroupCutover } from '../../packages/core/src/admin/cutover';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import type { Fault, RecordLine } from './checker';
import { evalsha, scriptShas } from './script-match';
import type { ChaosHarness } from './harness';
import { type MemberProcess, proxyOf, readRecords, sleep, waitFor } from './harness-tools';
import { mustBeOwned } from './redis-state';
import { RecordTail } from './record-tail';

/** SIGUSR2 to every member process not cut off: a failing spell starts (or ends). */
export function failingSpell(h: ChaosHarness): void {
  for (const m of h.members.values()) if (!m.isolated) m.child.kill('SIGUSR2');
}

/** SIGHUP to every member process not cut off: a flaky spell (failures that retries get past) starts or ends. */
function flakySpell(h: ChaosHarness): void {
  for (const m of h.members.values()) if (!m.isolated) m.child.kill('SIGHUP');
}

/** The member processes' `maxAttempts` (harness.ts): the attempt after which an entry is dead-lettered. */
const MAX_ATTEMPTS = 3;

/**
 * unsafe-lease (a retry due while the lease looks unsafe was dropped; da4f26b).
 * One member is replaced by one with a 3-session timeout and heartbeats every 1.5
 * sessions, whose heartbeats are then held 0.9 session at the proxy for two heartbeat cycles while
 * 30% of entries fail every attempt but the last (reads and handlers go on at full speed; no dead
 * letter is written, whose write would wait behind a held heartbeat and hold its shard up). Each heartbeat
 * still reaches Redis within the session (the member is never expired), but its answer comes so
 * late that the lease looks unsafe for about 0.9 s of every 2.4 s, while retries (100 ms backoff)
 * keep falling due. A retry must wait for a safe lease; one dropped leaves its entry pending at a
 * live owner while later entries of the shard run, which the checker reports as stuck. The member
 * stays for the rest of the run (a slower-session member is a legal configuration), so a stranded
 * entry stays visible.
 */
export async function unsafeLease(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const replaced = h.pick();
  await h.removeMember(replaced.handle, 'SIGTERM');
  const session = h.sessionTimeoutMs * 3;
  // A plain member: the fault's timing is tuned to one entry per handler call, acknowledged at its end.
  const victim = await h.spawnMember({ sessionTimeoutMs: session, heartbeatIntervalMs: session / 2, kind: 'plain' });
  fault.target = victim.memberId;
  fault.detail = `(session ${session} ms, replacing ${replaced.memberId})`;
  await h.waitUntilRecovered(30_000);
  const lateMs = Math.round(session * 0.3);
  // Two heartbeat cycles (the delay plus the interval each), so two unsafe windows.
  const holdMs = 2 * (lateMs + session / 2) + 300;
  // While the lease looks unsafe nothing may start, so entries do wait; not once it is safe again.
  h.excuse(victim, holdMs + session);
  flakySpell(h);
  try {
    // Heartbeats only: reads and handlers go on at full speed, so retries keep falling due.
    proxyOf(victim).delayMatching(evalsha(scriptShas('heartbeat')), lateMs);
    await sleep(holdMs);
  } finally {
    proxyOf(victim).clearFaults();
    flakySpell(h);
  }
  return { liftedAt: performance.now() };
}

/** The victim's handler call now running the last attempt of an entry (after long handlers began). */
function lastAttemptRunning(tail: RecordTail): RecordLine | undefined {
  const lines = tail.read();
  const from = lines.findIndex((l) => l.e === 'long-handlers');
  if (from < 0) return undefined;
  const starts = lines.slice(from).filter((l) => l.e === 'start' && (l.n ?? 0) >= MAX_ATTEMPTS);
  return starts.find((s) => !lines.some((l) => l.e === 'end' && l.id === s.id && l.t > s.t));
}

/** What a member recorded since its handlers turned long, for a fault that waited in vain (reads the whole file, once). */
export function whatItDid(member: MemberProcess): string {
  const lines = readRecords(member.recordFile);
  const from = lines.findIndex((l) => l.e === 'long-handlers');
  if (from < 0) return 'it never recorded long handlers';
  const since = lines.slice(from);
  const ends = since.filter((l) => l.e === 'end');
  const owned = new Set<number>();
  for (const l of lines) {
    if (l.e === 'assigned') for (const s of l.shards ?? []) owned.add(s);
    if (l.e === 'revoked' || l.e === 'fenced' || l.e === 'lease-lost') for (const s of l.shards ?? []) owned.delete(s);
  }
  const attempts = Math.max(0, ...since.filter((l) => l.e === 'start').map((l) => l.n ?? 0));
  const events = since.filter((l) => !['start', 'end', 'ack'].includes(l.e)).map((l) => l.e);
  return `since long handlers: ${since.filter((l) => l.e === 'start').length} starts, ${ends.filter((l) => l.ok === false).length} failed, most attempts of one entry ${attempts}; owns [${[...owned].join(',')}]; other records: ${[...new Set(events)].join(', ') || 'none'}`;
}

/**
 * zombie-dead-letter (SPEC 9.2: dead letters fenced like acks; da4f26b).
 * One member's handlers turn long (1.5 sessions) while 30% of entries fail every
 * attempt; as soon as it starts the last attempt of such an entry it is paused (SIGSTOP) until the
 * others own its shards (the new owner runs that entry, fails it too and dead-letters and
 * acknowledges it), then one session more, then resumed: its handler ends, fails, and the member
 * goes to dead-letter an entry of a shard it no longer owns. That write must be refused by the
 * fencing check (SPEC 9.2); one that lands is a dead letter by a member that was not the shard's
 * owner, also acknowledged by another, which the checker reports. The zombie is then replaced
 * (SIGKILL). Long handlers, the failing spell, the pause and the kill may each redeliver what runs
 * then: the fault lasts (`until`) from its start until the member is gone.
 */
export async function zombieDeadLetter(h: ChaosHarness, fault: Fault): Promise<void> {
  const victim = h.pick();
  fault.target = victim.memberId;
  h.excuse(victim, 120_000);
  failingSpell(h);
  let spell = true;
  try {
    const tail = new RecordTail(victim.recordFile);
    victim.child.kill('SIGUSR1');
    let last: RecordLine | undefined;
    // Each attempt is long (1.5 sessions) and the victim's shards may first have to work through
    // long runs begun before the spell: a last attempt can take a while to come.
    await waitFor('a last attempt to start at the victim', () => (last = lastAttemptRunning(tail)) !== undefined, 45_000, 20).catch(
      (error: Error) => {
        throw new Error(`${error.message} (${whatItDid(victim)})`);
      },
    );
    await h.isolate(
      fault,
      (m) => m.child.kill('SIGSTOP'),
      (m) => m.child.kill('SIGCONT'),
      victim,
    );
    fault.detail = `(entry ${last!.s}/${last!.id})`;
    const entry = last!;
    await waitFor('the paused attempt to end', () => tail.read().some((l) => l.e === 'end' && l.id === entry.id && l.t > entry.t), 10_000);
    // The member then writes the dead letter (which must be refused) or, if it learnt first that the
    // shard moved, does not try: either is fine, so this wait may run out.
    await waitFor(
      'the dead letter written or refused',
      () =>
        tail
          .read()
          .some((l) => l.t > entry.t && (l.e === 'dead-letter' ? l.id === entry.id : l.e === 'error' && (l.msg ?? '').includes(entry.id!))),
      2000,
    ).catch(() => undefined);
    failingSpell(h);
    spell = false;
  } finally {
    if (spell) failingSpell(h);
    // Long handlers for good: replaced (its pending work goes to the others). The kill redelivers
    // what it runs then, so the fault lasts until the member is gone.
    await h.removeMember(victim.handle, 'SIGKILL');
    fault.until = performance.timeOrigin + performance.now();
    await h.spawnMember();
  }
}

/**
 * revoke-twice (each revocation has its own deadline, SPEC 3; e52e2f2).
 * A side consumer group of scripted protocol members (no reader; removed afterwards):
 * "slow-acker" (rebalanceTimeoutMs 2 s) owns every shard; a first joiner makes it revoke some
 * (asked at t0), more joiners 1 s later make it revoke more; it acknowledges the first revocation at
 * t0 + 1.5 s and the second 1.5 s after it was asked (t0 + 2.5 s). Each revocation was acknowledged
 * within rebalanceTimeoutMs of when it was asked, so it must stay a member throughout; a second
 * revocation that inherits the first one's deadline gets it removed (the fault fails).
 */
export async function revokeTwice(h: ChaosHarness, fault: Fault): Promise<void> {
  const group = `revocation-probe-${h.faults.length}`;
  fault.detail = group;
  const coordinator = new CoordinatorClient(h.redis);
  const member = (id: string, extra = {}) =>
    new ProtocolMember(coordinator, h.streamPrefix, group, id, { sessionTimeoutMs: 30_000, ...extra });
  const slow = member('slow-acker', { rebalanceTimeoutMs: 2000 });
  const joiners: ProtocolMember[] = [];
  const failures: string[] = [];
  const expectMember = (what: string, response: HeartbeatResponse) => {
    if (response.errorCode !== ErrorCode.NONE) failures.push(`${what}: ${response.errorCode} ${response.errorMessage}`);
  };
  // Everyone heartbeats every 150 ms; the slow acker acknowledges only what it is told to.
  const tick = async (acked: number[]) => {
    expectMember(`slow-acker at ${Math.round(performance.now() - t0)} ms`, await slow.heartbeat({ ackedRevocations: acked }));
    for (const j of joiners) await j.heartbeat();
  };
  let t0 = performance.now();
  try {
    await slow.join();
    for (let i = 0; i < 10 && slow.owned.length === 0; i++) await slow.heartbeat();
    if (slow.owned.length === 0) throw new Error('the slow acker got no shards');
    joiners.push(member('joiner-0'));
    await joiners[0].join();
    t0 = performance.now();
    await tick([]);
    const first = [...slow.revoking];
    if (first.length === 0) throw new Error('the first join asked for no revocation');
    while (performance.now() - t0 < 1000) await Promise.all([tick([]), sleep(150)]);
    // More joiners until the slow acker's share shrinks again: a second revocation, asked now.
    const secondAskedAt = performance.now();
    while (slow.revoking.every((s) => first.includes(s)) && joiners.length < 8) {
      const joiner = member(`joiner-${joiners.length}`);
      joiners.push(joiner);
      await joiner.join();
      await tick([]);
    }
    const second = slow.revoking.filter((s) => !first.includes(s));
    if (second.length === 0) throw new Error('no second revocation');
    while (performance.now() - t0 < 1500) await Promise.all([tick([]), sleep(150)]);
    await tick(first);
    while (performance.now() - secondAskedAt < 1500) await Promise.all([tick([]), sleep(150)]);
    await tick(second);
    fault.detail += ` (revoked [${first.join(',')}] at 0 s, acked at 1.5 s; [${second.join(',')}] at ${((secondAskedAt - t0) / 1000).toFixed(1)} s, acked 1.5 s later)`;
    if (failures.length > 0)
      throw new Error(
        `removed although each revocation was acknowledged within rebalanceTimeoutMs (2000 ms) of being asked: ${failures[0]}`,
      );
  } finally {
    for (const m of [slow, ...joiners]) await m.leave().catch(() => undefined);
    // No reader ever reads for it: gone, so that it holds up no cutover of a later resize.
    const keys = h.admin.keys.groupKeys(h.streamPrefix, group);
    await h.redis.del(...keys.slice(2));
    await h.redis.srem(h.admin.keys.streamGroups(h.streamPrefix), group);
  }
}

/**
 * group-keys-lost (SPEC 9.3; e52e2f2). Epochs are raised well above where a recreated group starts (scripted visitors join
 * and leave; one of them, weighted, takes shards for a moment so they are granted again at the high
 * epoch), then the first group's coordinator keys are deleted (not the shards, not their fencing
 * tokens): the members find themselves unknown, rejoin, and the group is recreated. Its grants must
 * beat the tokens of its former life; a claim refused stalls the shard, so recovery here also means
 * every shard is read again within 10 s.
 */
export async function groupKeysLost(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const group = h.consumerGroup;
  h.excuse(undefined, h.sessionTimeoutMs * 8);
  const coordinator = new CoordinatorClient(h.redis);
  for (let i = 0; i < 5; i++) {
    const visitor = new ProtocolMember(coordinator, h.streamPrefix, group, `visitor-${i}`);
    await visitor.join();
    await visitor.leave();
  }
  const taker = new ProtocolMember(coordinator, h.streamPrefix, group, 'visitor-taker', { weight: 4 });
  await taker.join();
  await waitFor('the weighted visitor to own shards', async () => (await taker.heartbeat()).assignedShards.length > 0, 10_000, 50).catch(
    () => undefined,
  );
  await taker.leave();
  await h.waitUntilRecovered(30_000);
  const epoch = (await h.admin.describeGroup(h.streamPrefix, group)).group.groupEpoch;
  const keys = h.admin.keys.groupKeys(h.streamPrefix, group);
  await h.redis.del(...keys.slice(2));
  fault.detail = `${group} recreated, its keys lost at group epoch ${epoch}`;
  const liftedAt = performance.now();
  await h.waitUntilRecovered(30_000);
  await waitUntilRead(h, group, 10_000);
  return { liftedAt };
}

/**
 * Waits until the group reads again on every shard it must own: its last-delivered id moves on from
 * where it was when called, or reaches the shard's newest entry. An owner that cannot claim its shard
 * (or reads nothing) fails this, naming the shards. (Catching up on a backlog is not asked: a shard
 * behind by half a minute of entries after the faults before took longer than the bound once, and
 * was reading all along.) Nor is reading past the group's cutover hold: a group recreated over a
 * resized stream replays its resizes, and a shard read up to its hold point waits there by design
 * (the soak of 3d90774 at 639 s: shards 5 and 6, held while the group re-read a long history).
 */
export async function waitUntilRead(h: ChaosHarness, group: string, timeoutMs: number): Promise<void> {
  const description = await h.admin.describeGroup(h.streamPrefix, group);
  const stream = (shard: number) => h.admin.keys.shardStream(h.streamPrefix, shard);
  const delivered = async (shard: number) =>
    findGroupInfo(await h.redis.xinfo('GROUPS', stream(shard)).catch(() => []), group)?.lastDelivered ?? '0-0';
  const from = new Map<number, string>();
  for (const shard of description.shards.filter(mustBeOwned)) from.set(shard.shardIndex, await delivered(shard.shardIndex));
  let behind: number[] = [];
  try {
    await waitFor(
      'every shard read again',
      async () => {
        behind = [];
        const { cutover } = await readGroupCutover(h.redis, h.admin.keys, h.streamPrefix, group);
        for (const [shard, start] of from) {
          const now = await delivered(shard);
          if (compareStreamIds(now, start) > 0) continue;
          if (cutover?.held.includes(shard) && compareStreamIds(now, heldFrom(cutover, shard)) >= 0) continue;
          const [newest] = await h.redis.xrevrange(stream(shard), '+', '-', 'COUNT', 1);
          if (newest === undefined || compareStreamIds(now, newest[0]) >= 0) continue;
          behind.push(shard);
        }
        return behind.length === 0;
      },
      timeoutMs,
      100,
    );
  } catch {
    throw new Error(`shards [${behind.join(',')}] of ${group} not read for ${timeoutMs} ms after the group recovered`);
  }
}

/**
 * Retention before a group is created mid-run (new-group): every shard loses what every group has
 * acknowledged and is older than `keepMs`, so the new group reads the retained history (the last
 * `keepMs`, with the resizes just made, and whatever a slower group still needs), not a soak's whole
 * backlog, which two processes on this machine take minutes to read while every resize waits for
 * the group's cutovers. `CoordinatorAdmin.trim`'s dry run says, per shard, the lowest id a group
 * still needs; the cut is never above it. Returns the entries trimmed, "shard/id", for the checker
 * (the new group cannot read them).
 */
export async function trimHistory(h: ChaosHarness, keepMs: number): Promise<Set<string>> {
  const cuts = new Map<number, string>();
  const floor = `${Math.max(0, Math.floor(Date.now() - keepMs))}-0`;
  const needed = await h.admin.trim(h.streamPrefix, { dryRun: true });
  for (const shard of needed.shards) {
    if (shard.minId === undefined) continue; // left alone: a group has not read it yet, or no stream
    const cut = shard.minId === '' || compareStreamIds(floor, shard.minId) < 0 ? floor : shard.minId;
    await h.redis.xtrim(h.admin.keys.shardStream(h.streamPrefix, shard.shardIndex), 'MINID', cut);
    cuts.set(shard.shardIndex, cut);
  }
  const trimmed = new Set<string>();
  for (const p of [...h.load.produced, ...h.staleLoad.produced]) {
    const cut = cuts.get(p.shard);
    if (cut !== undefined && compareStreamIds(p.id, cut) < 0) trimmed.add(`${p.shard}/${p.id}`);
  }
  return trimmed;
}
