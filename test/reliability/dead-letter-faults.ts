/**
 * Dead-letter replay and purge as the soak's own actors (SPEC 10.5, 10.6; docs/operations.md, Replay
 * and Purge): an operator's admin, on a connection of its own behind a proxy, replays or purges a
 * few of the first group's dead letters while the members run, with a fault between two of an
 * operation's steps (the delete fails, the reply of the write or of the delete is lost with its
 * connection, the write arrives late after another replay took the mark over, a trim runs between
 * two replays or after a write), and tries again, as often as it takes, until the operation is done.
 * What they saw and asked for goes to `h.deadLetterOperations`; the checker's `deadLetterOutcomes`
 * holds every dead letter to replayed exactly once or still listed.
 */
import { CoordinatorAdmin, type DeadLetter as AdminDeadLetter } from '@redis-stream-coordinator/core';
import type { Redis } from 'ioredis';
import { type CommandVerdict, hookCommands } from '../support/command-hooks';
import type { TcpProxy } from '../support/tcp-proxy';
import { failingSpell } from './fault-scenarios';
import type { ChaosHarness } from './harness';
import { sleep, waitFor } from './harness-tools';
import { type DeadLetter, deadLetterKey, type Fault } from './records';
import { isScriptCommand, scriptCall } from './script-match';

/**
 * How old a replay's mark must be before another replay takes it over (the API's default is 15 s):
 * the actor retries within seconds, and a replay here takes milliseconds, so one that has not
 * finished after a second stopped (its reply lost, its delete failed).
 */
const TAKE_OVER_AFTER_MS = 1000;

/** Between two tries of one operation: a few per take-over time. */
const RETRY_EVERY_MS = 300;

/** Tries of one operation before the fault gives up on it (about 15 s: many take-over times). */
const MAX_TRIES = 50;

/** How long one call of the admin may take before the actor counts it failed and tries again. */
const CALL_DEADLINE_MS = 15_000;

/** Dead letters one fault works on (the oldest the actors have not asked for yet). */
const LETTERS_PER_FAULT = 3;

/** How long a failing spell may take to leave this many dead letters to work on. */
const DEAD_LETTERS_WAIT_MS = 10_000;

type ReplayStep = 'clean' | 'delete-fails' | 'delete-reply-lost' | 'write-reply-lost' | 'trim-after-write' | 'write-late';
/** The first is in every fault (the late write, which only the tombstones stop); then others, by the seed. */
const REPLAY_STEPS: ReplayStep[] = ['write-late', 'clean', 'delete-fails', 'delete-reply-lost', 'write-reply-lost', 'trim-after-write'];

type PurgeStep =
  | 'clean'
  | 'delete-fails'
  | 'delete-reply-lost'
  | 'after-stopped-replay'
  | 'while-replay-write-late'
  | 'late-write-after-take-over';
/** As REPLAY_STEPS: the first in every fault. */
const PURGE_STEPS: PurgeStep[] = [
  'late-write-after-take-over',
  'clean',
  'delete-fails',
  'delete-reply-lost',
  'after-stopped-replay',
  'while-replay-write-late',
];

/**
 * The steps for `count` operations of one fault: the first of `steps`, then others chosen by the
 * seed (none twice), in an order the seed decides.
 */
function stepsFor<T>(h: ChaosHarness, steps: T[], count: number): T[] {
  const others = steps.slice(1).sort(() => h.random() - 0.5);
  return [steps[0], ...others].slice(0, count).sort(() => h.random() - 0.5);
}

/** The admin of one actor: its own connection behind its own proxy, and a rule that fails its next matching command. */
interface Actor {
  admin: CoordinatorAdmin;
  proxy: TcpProxy;
  /** Whether its client sends a command again after a reconnect when its reply was lost. */
  resend: boolean;
  /** Fails the next call of `script` on the actor's connection (nothing reaches Redis, as with a dropped connection). */
  failNext(script: string): void;
  /** Drops the rules one operation armed and did not use, so that they do not hit the next one. */
  reset(): void;
  close(): Promise<void>;
}

async function openActor(h: ChaosHarness): Promise<Actor> {
  const proxy = (await h.target.proxy())!;
  // One time in two the client sends again, once it reconnected, what got no reply (the harness's
  // clients: a lost reply's command runs twice); otherwise (maxRetriesPerRequest 0) the call fails at
  // once and the actor tries again. (Not autoResendUnfulfilledCommands false: ioredis then drops the
  // unanswered commands without settling them, and the call hangs.)
  const resend = h.random() < 0.5;
  const client = h.target.connect(proxy, resend ? {} : { maxRetriesPerRequest: 0 }) as Redis;
  client.on('error', () => undefined);
  let failing: ((name: string, args: string[]) => boolean) | undefined;
  hookCommands(client, (name, args): CommandVerdict => {
    if (!failing?.(name, args)) return 'send';
    failing = undefined;
    return new Error('chaos: connection lost before the command was sent');
  });
  return {
    admin: new CoordinatorAdmin(client),
    proxy,
    resend,
    failNext: (script) => (failing = isScriptCommand(script)),
    reset: () => {
      failing = undefined;
      proxy.clearFaults();
    },
    close: async () => {
      client.disconnect();
      await proxy.stop();
    },
  };
}

/** The checker's shape of an admin's dead letter. */
export function asRecord(group: string, letter: AdminDeadLetter): DeadLetter {
  return {
    group,
    ref: letter.ref,
    shard: letter.shardIndex,
    id: letter.entryId,
    member: letter.memberId,
    t: Number(letter.deadLetterId.split('-')[0]),
  };
}

/**
 * The first group's dead letters no actor has asked about yet, the oldest first (at most `count`);
 * with none, a failing spell (30% of entries fail every attempt) until some are written. Every one
 * listed is recorded as seen: each must end replayed once or still listed.
 */
async function lettersToWorkOn(h: ChaosHarness, count: number): Promise<AdminDeadLetter[]> {
  const group = h.consumerGroup;
  const ops = h.deadLetterOperations;
  const fresh = async () => {
    const listed = await h.admin.readDeadLetters(h.streamPrefix, group, { count: 10_000 });
    for (const letter of listed) ops.seen.push(asRecord(group, letter));
    return listed.filter((l) => !ops.replayAsked.has(deadLetterKey(group, l.ref)) && !ops.purgeAsked.has(deadLetterKey(group, l.ref)));
  };
  let letters = await fresh();
  if (letters.length === 0) {
    failingSpell(h);
    try {
      await waitFor('dead letters to replay or purge', async () => (letters = await fresh()).length >= count, DEAD_LETTERS_WAIT_MS, 200);
    } catch {
      // Fewer than wished: work on what there is (none: the fault says so).
    } finally {
      failingSpell(h);
    }
  }
  return letters.slice(0, count);
}

/** One admin call with a deadline: a call that hangs is a failed try, and the next try goes on. */
async function bounded<T>(call: Promise<T>): Promise<T> {
  call.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`chaos: no answer within ${CALL_DEADLINE_MS} ms`)), CALL_DEADLINE_MS);
  });
  try {
    return await Promise.race([call, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Tries `attempt` until it says it is done, at most MAX_TRIES times, RETRY_EVERY_MS apart; `before`
 * arms a fault for a try (the first, and each following one with a chance of one in three, so an
 * operation fails any number of times before it goes through). Returns the number of tries.
 */
async function untilDone(
  h: ChaosHarness,
  what: string,
  attempt: () => Promise<boolean>,
  before: (tryNumber: number) => Promise<void> | void,
): Promise<number> {
  let faulted = true;
  let lastError = '';
  for (let tries = 1; tries <= MAX_TRIES; tries++) {
    if (faulted) await before(tries);
    faulted = faulted && h.random() < 1 / 3;
    try {
      if (await attempt()) return tries;
    } catch (error) {
      lastError = (error as Error).message;
    }
    await sleep(RETRY_EVERY_MS);
  }
  throw new Error(`${what} not done after ${MAX_TRIES} tries; last error: ${lastError}`);
}

/** Trims every shard stream as retention would, now (a trim between two steps or two replays). */
async function trimNow(h: ChaosHarness): Promise<void> {
  await h.admin.trim(h.streamPrefix).catch(() => undefined);
}

/**
 * Replays up to LETTERS_PER_FAULT dead letters of the first group, each with a fault between its
 * steps chosen by the seed, a trim between two replays one time in two, and each retried until done.
 */
export async function replayDeadLetters(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const letters = await lettersToWorkOn(h, LETTERS_PER_FAULT);
  if (letters.length === 0) throw new Error(`no dead letter of ${h.consumerGroup} to replay after a failing spell`);
  const actor = await openActor(h);
  const done: string[] = [];
  const steps = stepsFor(h, REPLAY_STEPS, letters.length);
  try {
    for (const [i, letter] of letters.entries()) {
      if (i > 0 && h.random() < 0.5) {
        await trimNow(h);
        done.push('trim');
      }
      const step = steps[i];
      const began = performance.now();
      const tries = await replayThrough(h, actor, letter, step);
      done.push(`${letter.ref} ${step} (${tries} tries, ${Math.round(performance.now() - began)} ms)`);
    }
  } finally {
    await actor.close();
  }
  fault.detail = `(${actor.resend ? 'resending' : 'not resending'} what got no reply: ${done.join(', ')})`;
  return { liftedAt: performance.now() };
}

async function replayThrough(h: ChaosHarness, actor: Actor, letter: AdminDeadLetter, step: ReplayStep): Promise<number> {
  const group = h.consumerGroup;
  const key = deadLetterKey(group, letter.ref);
  h.deadLetterOperations.replayAsked.add(key);
  const replay = (admin: CoordinatorAdmin) =>
    bounded(admin.replayDeadLetter(h.streamPrefix, group, letter.ref, { takeOverAfterMs: TAKE_OVER_AFTER_MS })).then((result) => {
      if (result.to) h.deadLetterOperations.answered.set(key, `${result.to.shardIndex}/${result.to.id}`);
      return true;
    });
  let late: Promise<void> | undefined;
  const tries = await untilDone(
    h,
    `replay of ${letter.ref}`,
    () => replay(actor.admin),
    async () => {
      switch (step) {
        case 'clean':
          return;
        case 'delete-fails':
          actor.failNext('dropDeadLetter');
          return;
        case 'delete-reply-lost':
          void actor.proxy.dropNextReply(scriptCall('dropDeadLetter'));
          return;
        case 'write-reply-lost':
          void actor.proxy.dropNextReply(scriptCall('replayEntry'));
          return;
        case 'trim-after-write': {
          // The write lands, its reply is lost; the group handles the entry and a trim deletes it
          // before the next try, which must find the write by its record, not in the stream.
          const dropped = actor.proxy.dropNextReply(scriptCall('replayEntry'));
          void dropped.then(async () => {
            await sleep(1000);
            await trimNow(h);
          });
          return;
        }
        case 'write-late': {
          // The write waits on a slow link until another replay, past TAKE_OVER_AFTER_MS, took the
          // mark over and finished; then it lands: it must write nothing (the record's tombstone).
          if (late) return;
          const held = actor.proxy.holdNextRequest(scriptCall('replayEntry'));
          late = (async () => {
            const arrived = await Promise.race([held.arrived.then(() => true), sleep(CALL_DEADLINE_MS).then(() => false)]);
            if (arrived) {
              await sleep(TAKE_OVER_AFTER_MS + 200);
              await replay(h.admin).catch(() => undefined);
            }
            held.release();
          })();
          return;
        }
      }
    },
  );
  await late;
  actor.reset();
  return tries;
}

/**
 * Purges up to LETTERS_PER_FAULT dead letters of the first group, each with a fault between its
 * steps chosen by the seed (some after a replay of it stopped half-way, or while a replay's write is
 * on a slow link), each retried until done; then a replay of each must find it gone.
 */
export async function purgeDeadLetters(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const letters = await lettersToWorkOn(h, LETTERS_PER_FAULT);
  if (letters.length === 0) throw new Error(`no dead letter of ${h.consumerGroup} to purge after a failing spell`);
  const actor = await openActor(h);
  const done: string[] = [];
  let releaseLate: (() => void) | undefined;
  const steps = stepsFor(h, PURGE_STEPS, letters.length);
  try {
    for (const [i, letter] of letters.entries()) {
      const step = steps[i];
      const began = performance.now();
      const key = deadLetterKey(h.consumerGroup, letter.ref);
      const replay = () =>
        bounded(actor.admin.replayDeadLetter(h.streamPrefix, h.consumerGroup, letter.ref, { takeOverAfterMs: TAKE_OVER_AFTER_MS }));
      let late: Promise<unknown> | undefined;
      if (step === 'after-stopped-replay') {
        // A replay writes and stops before its delete; the operator purges instead of replaying again.
        h.deadLetterOperations.replayAsked.add(key);
        actor.failNext('dropDeadLetter');
        await replay().catch(() => undefined);
      } else if (step === 'while-replay-write-late' || step === 'late-write-after-take-over') {
        // A replay's write waits on a slow link (and with it the actor's connection) while the purge
        // goes through on another; then it lands, once at most.
        h.deadLetterOperations.replayAsked.add(key);
        const held = actor.proxy.holdNextRequest(scriptCall('replayEntry'));
        releaseLate = () => held.release();
        late = replay().catch(() => undefined);
        await Promise.race([held.arrived, sleep(CALL_DEADLINE_MS)]);
        if (step === 'late-write-after-take-over') {
          // Meanwhile a second replay takes the mark over, writes, and stops before its delete; the
          // purge then retires its record, and the late write must find it (not write a second time).
          await sleep(TAKE_OVER_AFTER_MS + 200);
          const other = await openActor(h);
          other.failNext('dropDeadLetter');
          await bounded(other.admin.replayDeadLetter(h.streamPrefix, h.consumerGroup, letter.ref, { takeOverAfterMs: TAKE_OVER_AFTER_MS }))
            .catch(() => undefined)
            .finally(() => other.close());
        }
      }
      h.deadLetterOperations.purgeAsked.add(key);
      const admin = step === 'while-replay-write-late' || step === 'late-write-after-take-over' ? h.admin : actor.admin;
      const tries = await untilDone(
        h,
        `purge of ${letter.ref}`,
        async () => {
          await bounded(admin.purgeDeadLetter(h.streamPrefix, h.consumerGroup, letter.ref));
          return true;
        },
        () => {
          if (step === 'delete-fails') actor.failNext('dropDeadLetter');
          if (step === 'delete-reply-lost') void actor.proxy.dropNextReply(scriptCall('dropDeadLetter'));
        },
      );
      releaseLate?.();
      releaseLate = undefined;
      await late;
      actor.reset();
      // Purged is gone: replaying it now writes nothing.
      const again = await bounded(
        h.admin.replayDeadLetter(h.streamPrefix, h.consumerGroup, letter.ref, { takeOverAfterMs: TAKE_OVER_AFTER_MS }),
      );
      if (again.status !== 'gone') throw new Error(`dead letter ${letter.ref} purged, yet a replay of it then answered ${again.status}`);
      done.push(`${letter.ref} ${step} (${tries} tries, ${Math.round(performance.now() - began)} ms)`);
    }
  } finally {
    releaseLate?.();
    await actor.close();
  }
  fault.detail = `(${actor.resend ? 'resending' : 'not resending'} what got no reply: ${done.join(', ')})`;
  return { liftedAt: performance.now() };
}
