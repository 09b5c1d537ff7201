/**
 * The seam fault kinds (SPEC 10.1, 10.2): faults one-way or on one of a member's several
 * connections, where the symmetric faults of faults.ts never reach. Each watches, while it lasts,
 * that no shard stays owned but unread past `ownedUnreadBoundMs` (read-watch.ts), and the
 * half-open kinds that the victim listed its trouble in `stats().problems` meanwhile.
 */
import { TcpProxy } from '../support/tcp-proxy';
import type { Fault } from './checker';
import type { ChaosHarness, SpawnOptions } from './harness';
import { type MemberProcess, proxyOf, readRecordsSince, sleep } from './harness-tools';
import { ownedUnreadBoundMs, watchReads } from './read-watch';
import { evalsha, scriptShas } from './script-match';

/**
 * How late a late answer is: half a session, past the third of it a member waits for a heartbeat's
 * answer (so every answer comes after the member stopped waiting), yet each request lands in time.
 */
const LATE_ANSWER_SESSIONS = 0.5;

/**
 * How long a seam fault lasts, in owned-but-unread bounds: long enough that a shard left unread for
 * the whole fault is well past the bound (and so reported), short enough for the short tier.
 */
const HOLD_BOUNDS = 1.6;

/** The connection each half-open kind silences: the first request that only it carries. */
export type HalfOpenConnection = 'commands' | 'reads' | 'acks' | 'wake';

/**
 * The member's answers come late, its requests on time, for the hold: a heartbeat Redis takes but
 * whose answer the member never waits for. Redis and the member must agree it is not alive (SPEC
 * 10.2): its shards go to the others within the bound.
 */
export async function lateAnswers(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const victim = h.pick();
  fault.target = victim.memberId;
  const holdMs = Math.round(ownedUnreadBoundMs(h) * HOLD_BOUNDS);
  h.excuse(victim, holdMs + h.sessionTimeoutMs * 3);
  proxyOf(victim).delay('reply', Math.round(h.sessionTimeoutMs * LATE_ANSWER_SESSIONS));
  try {
    await expectRead(h, fault, holdMs);
  } finally {
    proxyOf(victim).clearFaults();
  }
  return { liftedAt: performance.now() };
}

/**
 * A new member joins over a link whose answers come late from its first byte: it must not be made a
 * member the others revoke shards to (it would never read them); once its link is fast it joins.
 */
export async function lateJoin(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const holdMs = Math.round(ownedUnreadBoundMs(h) * HOLD_BOUNDS);
  let link: TcpProxy | undefined;
  const joiner = await h.spawnMember({
    kind: 'plain',
    waitReady: false,
    onProxy: (proxy) => {
      link = proxy;
      proxy.delay('reply', Math.round(h.sessionTimeoutMs * LATE_ANSWER_SESSIONS));
    },
  });
  fault.target = joiner.memberId;
  // Not a possible owner while its link is late (waitUntilRecovered does not wait for it to join).
  joiner.isolated = true;
  h.excuse(joiner, holdMs + h.sessionTimeoutMs * 3);
  try {
    await expectRead(h, fault, holdMs);
  } finally {
    link?.clearFaults();
    joiner.isolated = false;
  }
  await leaveAtMost(h, h.settings.members + 1);
  return { liftedAt: performance.now() };
}

/**
 * One connection of a member goes half-open (no answer, no close) and stays so: the member must
 * find out and reset it (SPEC 10.1), its shards read meanwhile within the bound (by it or by the
 * others), and the trouble listed in its `stats().problems` while it lasts. The victim is a member
 * started for the fault with what makes that connection its own (acks waiting for replicas, a
 * companion for the wake-up subscriber) and `resetStuckConnection`, as an application that made its
 * own connection would set it; it replaces one of the first group's members and stays.
 */
export async function halfOpen(h: ChaosHarness, fault: Fault, connection: HalfOpenConnection): Promise<{ liftedAt: number }> {
  const replaced = h.pick();
  await h.removeMember(replaced.handle, 'SIGTERM');
  // A plain member: what its connection's trouble does to it is the fault's question, not what a
  // member kind adds (manual acks each waiting on an ack batch whose WAIT can never count a replica here).
  const options: SpawnOptions = { resetStuckConnection: true, kind: 'plain' };
  if (connection === 'acks') options.ackWaitForReplicas = { replicas: 1, timeoutMs: 1 };
  // Reading alone: a blocking XREADGROUP on the reader's own connection.
  if (connection === 'reads') options.companion = false;
  // Every member's client has one wake-up subscriber, which subscribes as the member joins: armed
  // before the process starts (a joining member whose subscriber is half-open from its first call).
  let silenced: Promise<void> | undefined;
  if (connection === 'wake') options.onProxy = (proxy) => (silenced = proxy.blackholeConnectionOf(TcpProxy.command('SUBSCRIBE')));
  const before = new Set(h.members.keys());
  const spawnedAt = performance.timeOrigin + performance.now();
  try {
    const victim = await h.spawnMember(options);
    fault.target = victim.memberId;
    fault.detail = `(its ${connection} connection; replacing ${replaced.memberId})`;
    await h.waitUntilRecovered(30_000);
    const holdMs = Math.round(ownedUnreadBoundMs(h) * HOLD_BOUNDS);
    h.excuse(victim, holdMs + h.sessionTimeoutMs * 3);
    silenced ??= proxyOf(victim).blackholeConnectionOf(HALF_OPEN_MATCH[connection]());
    const timeout = sleep(10_000).then(() => 'timeout' as const);
    if ((await Promise.race([silenced, timeout])) === 'timeout')
      throw new Error(`no ${connection} request from ${victim.memberId} in 10 s to silence its connection`);
    // The wake-up subscriber was silenced as the member joined: what it said since then counts.
    const from = connection === 'wake' ? spawnedAt : performance.timeOrigin + performance.now();
    await expectRead(h, fault, holdMs);
    const said = await visibleSince(victim, from, connection);
    if (said.length === 0)
      throw new Error(
        `${victim.memberId} said nothing (${connection === 'reads' ? 'no error, ' : ''}no stats().problems line) while its ${connection} connection was half-open`,
      );
    fault.detail += ` said: ${said[0]}`;
    return { liftedAt: performance.now() };
  } catch (error) {
    // Whatever it left behind (a start that never returned, a connection never reset) must not
    // hold up the faults after this one: the victim goes, a plain member takes its place.
    for (const handle of [...h.members.keys()]) if (!before.has(handle)) await h.removeMember(handle, 'SIGKILL');
    fault.until = performance.timeOrigin + performance.now();
    await h.spawnMember();
    throw error;
  }
}

/** The request that only the connection carries (one match each, made when needed: the shas are read from the scripts). */
const HALF_OPEN_MATCH: Record<HalfOpenConnection, () => (request: string) => boolean> = {
  commands: () => evalsha(scriptShas('heartbeat')),
  // A blocking read goes on the reader's own connection (or the shared read connection's doorbell).
  reads: () => TcpProxy.command('XREADGROUP', 'BLOCK'),
  acks: () => TcpProxy.command('WAIT'),
  wake: () => TcpProxy.command('SUBSCRIBE'),
};

/**
 * `stop()` while an acknowledgement is in flight and the network freezes: it must return within its
 * documented bound (docs/runtime.md, "stop() while Redis does not answer at all"), each step bounded.
 */
export async function freezeOnStop(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const victim = h.pick();
  fault.target = victim.memberId;
  const proxy = proxyOf(victim);
  const held = proxy.holdNextRequest(evalsha(scriptShas('ack')));
  const timeout = sleep(10_000).then(() => 'timeout' as const);
  if ((await Promise.race([held.arrived, timeout])) === 'timeout') {
    held.release();
    throw new Error(`no acknowledgement from ${victim.memberId} in 10 s`);
  }
  // The ack is under way and unanswered; now nothing moves either way, and the member is told to stop.
  proxy.freeze();
  held.release();
  victim.isolated = true;
  h.excuse(victim, 60_000);
  const bound = stopBoundMs(h);
  const started = performance.now();
  victim.child.kill('SIGTERM');
  const exited = await Promise.race([victim.exited.then(() => true), sleep(bound).then(() => false)]);
  const took = Math.round(performance.now() - started);
  proxy.thaw();
  await h.removeMember(victim.handle, 'SIGKILL');
  fault.until = performance.timeOrigin + performance.now();
  await h.spawnMember();
  if (!exited) throw new Error(`stop() had not returned ${bound} ms after SIGTERM with an ack in flight and the network frozen`);
  fault.detail = `(stop() returned in ${took} ms, bound ${bound} ms)`;
  return { liftedAt: performance.now() };
}

/**
 * stop()'s bound with nothing answering (docs/runtime.md): the leave (a third of the session), the
 * last ack flush (max(2 s, a third of the session) plus WAIT's timeout, plus one backoff of at most
 * 2 s), the read loop (blockMs 500 plus max(2 s, a third of the session, blockMs)), and a second for a
 * loaded machine; handlers take 1 ms here, so the drain adds nothing.
 */
function stopBoundMs(h: ChaosHarness): number {
  const third = h.sessionTimeoutMs / 3;
  return Math.round(third + Math.max(2000, third) + 2000 + 500 + Math.max(2000, third, 500) + 1000);
}

/** Watches every shard read for `holdMs`; a shard owned but unread past the bound fails the fault. */
async function expectRead(h: ChaosHarness, fault: Fault, holdMs: number): Promise<void> {
  const unread = await watchReads(h, holdMs, ownedUnreadBoundMs(h));
  if (unread.length > 0) throw new Error(`owned but unread past ${ownedUnreadBoundMs(h)} ms: ${unread.join('; ')}`);
  fault.detail = `${fault.detail ?? ''} (every shard read within ${ownedUnreadBoundMs(h)} ms for ${holdMs} ms)`.trim();
}

/**
 * Where an 'error' event is what the member must say: a lost read is reset at once (no lasting
 * problem to list), and a SUBSCRIBE without an answer at join is given up after its deadline and
 * sent again on the reset connection, where it is answered at once (its problems line lasts only
 * that long; the member heartbeats at a short interval meanwhile).
 */
const ERROR_SUFFICES = new Set<HalfOpenConnection>(['reads', 'wake']);

/**
 * A member whose ack calls got no answer twice in a row resets their connection and says so in an
 * 'error' (ack-batcher.ts). Its problems line lasts only from the first unanswered call to that
 * reset, and the member process samples problems every PROBLEMS_SAMPLE_MS: the soak of 32d0a56
 * (seed 20261202, 929 s) found the line of one victim in none of its samples. The error is in the
 * record whenever it was said.
 */
const ACKS_RESET_SAID = /acknowledgement calls in a row got no answer/;

/**
 * A stuck command connection is reset after two heartbeats without an answer (resetStuckConnection,
 * which the victim sets), and the next heartbeat, on the new connection, clears its problems line:
 * in the soak of 37169ab that line lasted under 70 ms, less than the process' sampling interval, and
 * the fault failed though the member had said so ('… the command connection was reset') and owned
 * its shard again. That error suffices too.
 */
const RESET_SAID = /the command connection was reset/;

/**
 * What the member said about its trouble since `from` (wall-clock ms): its stats().problems lines
 * (what health reports); for a lost read, whose reset is immediate, its 'error' events too.
 */
async function visibleSince(member: MemberProcess, from: number, connection: HalfOpenConnection): Promise<string[]> {
  const lines = await readRecordsSince(member.recordFile, from);
  const problems = lines.filter((l) => l.e === 'problems').flatMap((l) => l.lines ?? []);
  const errors = lines
    .filter(
      (l) =>
        l.e === 'error' &&
        (ERROR_SUFFICES.has(connection) ||
          (connection === 'commands' && RESET_SAID.test(String(l.msg))) ||
          (connection === 'acks' && ACKS_RESET_SAID.test(String(l.msg)))),
    )
    .map((l) => `error: ${l.msg}`);
  return [...problems, ...errors];
}

/** The oldest members of the first group leave gracefully until at most `most` are left (as join does). */
async function leaveAtMost(h: ChaosHarness, most: number): Promise<void> {
  const first = h.firstGroupMembers();
  while (first.length > most) {
    const oldest = first.shift()!;
    h.faults.push({ kind: 'graceful', target: oldest.memberId, at: performance.timeOrigin + performance.now() });
    await h.removeMember(oldest.handle, 'SIGTERM');
  }
}
