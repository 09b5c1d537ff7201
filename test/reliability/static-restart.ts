/**
 * static-restart (docs/runtime.md, Static membership; SPEC 9.4): a static member's process is
 * replaced by its next instance, with the same `memberInstanceId`, inside its session:
 * - graceful: SIGTERM (it drains, acknowledges and departs, keeping its membership), then the next
 *   instance starts;
 * - crash: the next instance starts and asks to join (refused while the old one heartbeats), then
 *   the old one gets SIGKILL: two heartbeat intervals of silence later the next one takes over;
 * - zombie: the old instance's handlers turn long, it is paused (SIGSTOP) while one runs, the next
 *   instance takes over, then the old one resumes: its run ends, and its acknowledgement must be
 *   refused by the new epoch's fencing tokens (the checker's overlaps, per process, would see it).
 * When the coordinator says the member came back in time (MEMBER_STATIC_REJOINED), it must own the
 * very shards it owned before: nothing revoked, nothing handed off. (On a loaded machine the next
 * instance may come too late: the member expired, which the detail says; no failure.)
 */
import type { Fault } from './records';
import type { ChaosHarness } from './harness';
import { type MemberProcess, sleep, waitFor } from './harness-tools';
import { longHandlerStarted, RecordTail } from './record-tail';

type How = 'graceful' | 'crash' | 'zombie';
const HOWS: How[] = ['graceful', 'crash', 'zombie'];

/** How long the next instance may take to join (a process start on a loaded machine, its refusals while the old one lives). */
const READY_WITHIN_MS = 20_000;

export async function staticRestart(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const victim = await staticVictim(h);
  const before = new Set(h.members.keys());
  try {
    return await restart(h, fault, victim);
  } catch (error) {
    // Whatever it left behind (an old instance with long handlers, a next one still asking to
    // join) must not hold up the faults after this one: every instance goes, a new member takes its place.
    for (const handle of [...h.members.keys()])
      if ((!before.has(handle) || handle === victim.handle) && h.members.get(handle)?.memberId === victim.memberId)
        await h.removeMember(handle, 'SIGKILL');
    fault.until = performance.timeOrigin + performance.now();
    await h.spawnMember();
    throw error;
  }
}

async function restart(h: ChaosHarness, fault: Fault, victim: MemberProcess): Promise<{ liftedAt: number }> {
  const how = HOWS[Math.floor(h.random() * HOWS.length)];
  const { memberId } = victim;
  fault.target = memberId;
  h.excuse(victim, 60_000);
  // The zombie's old instance is to be paused while a long handler runs: its handlers turn long first.
  const tail = new RecordTail(victim.recordFile);
  if (how === 'zombie') {
    victim.child.kill('SIGUSR1');
    await waitFor(`a long handler to start at ${victim.handle}`, () => longHandlerStarted(tail), READY_WITHIN_MS, 20);
  }
  // The next instance starts first (a process start takes longer than a session on a busy machine)
  // and asks to join: refused while the old one heartbeats, for up to a session. Then the old one goes.
  let next = await h.spawnMember({ memberId, kind: 'static', waitReady: false });
  await waitFor(`${next.handle} to connect`, () => (next.proxy?.connections ?? 1) > 0 || next.child.exitCode !== null, READY_WITHIN_MS, 10);
  // What the member owns as its old instance goes, and where the group's event log stands then.
  const shardsBefore = await ownedBy(h, memberId);
  const [lastEvent] = await h.admin.readGroupEvents(h.streamPrefix, h.consumerGroup, { count: 1 });
  const stoppedAt = performance.now();
  let said = '';
  if (how === 'graceful') {
    await h.removeMember(victim.handle, 'SIGTERM');
  } else if (how === 'crash') {
    await h.removeMember(victim.handle, 'SIGKILL');
  } else {
    victim.isolated = true;
    victim.child.kill('SIGSTOP');
    next = await readyOrAgain(h, next);
    // The next instance reads (and runs again what the old one was running), then the old one resumes.
    await sleep(h.sessionTimeoutMs);
    const resumedAt = performance.timeOrigin + performance.now();
    victim.child.kill('SIGCONT');
    // Its long run ends (1.5 sessions at most) and it tries to acknowledge it: that must be refused.
    await sleep(h.sessionTimeoutMs * 2);
    said = zombieAcks(tail, resumedAt);
    await h.removeMember(victim.handle, 'SIGKILL');
    if (said.startsWith('accepted')) {
      fault.until = performance.timeOrigin + performance.now();
      throw new Error(`the old instance of static member ${memberId} ${said} after its next instance took over`);
    }
  }
  next = await readyOrAgain(h, next);
  h.excuse(next, h.sessionTimeoutMs * 3);
  fault.until = performance.timeOrigin + performance.now();
  await h.waitUntilRecovered(30_000);
  const events = await h.admin.readGroupEvents(h.streamPrefix, h.consumerGroup, { after: lastEvent?.id, count: 10_000 });
  const rejoin = events.findIndex((e) => e.type === 'MEMBER_STATIC_REJOINED' && e.memberId === memberId);
  const took = Math.round(performance.now() - stoppedAt);
  // Back in time, the member keeps the very shards it had: the rejoin takes its assignment as it
  // is, nothing is revoked or handed off. Unless the group changed meanwhile for another reason
  // (another member expired on a starved machine): then there is nothing to compare with.
  const others = (list: typeof events) => list.filter((e) => e.memberId !== memberId);
  let outcome = 'not back inside its session: it expired and joined anew';
  if (rejoin >= 0) {
    const kept = events[rejoin].detail.split(',').filter(Boolean).map(Number);
    const shardsAfter = await ownedBy(h, memberId);
    const moved = [
      ...(others(events.slice(0, rejoin)).length === 0 ? [kept] : []),
      ...(others(events).length === 0 ? [shardsAfter] : []),
    ].find((shards) => shards.join() !== shardsBefore.join());
    if (moved)
      throw new Error(
        `static member ${memberId} came back inside its session (MEMBER_STATIC_REJOINED, ${how}) with [${moved}] instead of [${shardsBefore}]; ` +
          `the group's events since: ${events.map((e) => `${e.type} ${e.memberId} ${e.detail}`.trim()).join('; ')}; shards now: ${await shardsNow(h)}`,
      );
    outcome =
      others(events).length === 0
        ? `took its shards [${shardsBefore}] back`
        : 'took the member over (the group changed meanwhile: shards not compared)';
  }
  fault.detail = `(${how}: ${outcome} in ${took} ms${said ? `; the old instance's acks ${said}` : ''})`;
  return { liftedAt: performance.now() };
}

/**
 * The next instance once it joined; if it was refused for good (the old one still heartbeat a
 * session after its first try, on a busy machine), another one, now that the old one is gone.
 */
async function readyOrAgain(h: ChaosHarness, next: MemberProcess): Promise<MemberProcess> {
  try {
    await next.ready;
    return next;
  } catch {
    await h.removeMember(next.handle, 'SIGKILL');
    return h.spawnMember({ memberId: next.memberId, kind: 'static' });
  }
}

/** A static member of the first group, not cut off: one of the run's, or one started for the fault in place of another member. */
async function staticVictim(h: ChaosHarness): Promise<MemberProcess> {
  const statics = h.firstGroupMembers().filter((m) => m.kind === 'static' && !m.isolated);
  if (statics.length > 0) return statics[Math.floor(h.random() * statics.length)];
  const replaced = h.pick();
  await h.removeMember(replaced.handle, 'SIGTERM');
  const made = await h.spawnMember({ kind: 'static' });
  await h.waitUntilRecovered(30_000);
  return made;
}

/** The shards `memberId` owns now, by the coordinator's record. */
async function ownedBy(h: ChaosHarness, memberId: string): Promise<number[]> {
  const d = await h.admin.describeGroup(h.streamPrefix, h.consumerGroup);
  return d.shards.filter((s) => s.owner === memberId).map((s) => s.shardIndex);
}

/**
 * What became of the acknowledgements the old instance made, after it resumed, of runs that ended
 * after it resumed (an ack whose reply was only read then ran before the pause, under its own grant).
 */
function zombieAcks(tail: RecordTail, resumedAt: number): string {
  const lines = tail.read().filter((l) => l.t >= resumedAt);
  const ended = new Set(lines.filter((l) => l.e === 'end').map((l) => `${l.s}/${l.id}`));
  const acks = lines.filter((l) => l.e === 'ack' && (l.ids ?? []).some((id) => ended.has(`${l.s}/${id}`)));
  const accepted = acks.filter((l) => l.ok);
  if (accepted.length > 0) return `accepted: ${accepted.map((l) => `shard ${l.s} [${l.ids}]`).join(', ')}`;
  return acks.length > 0 ? `refused (${acks.length})` : 'none sent (it learnt it was fenced first)';
}

/** Each shard's owner and state, for a failure's message. */
async function shardsNow(h: ChaosHarness): Promise<string> {
  const d = await h.admin.describeGroup(h.streamPrefix, h.consumerGroup);
  return d.shards.map((s) => `${s.shardIndex} ${s.owner ?? '-'} ${s.state}`).join(', ');
}
