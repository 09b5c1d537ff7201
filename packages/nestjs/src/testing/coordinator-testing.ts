import type { INestApplicationContext } from '@nestjs/common';
import {
  type CoordinatorAdmin,
  type DeadLetterEvent,
  type GroupDescription,
  type OutgoingMessage,
  type SendResult,
  SHARD_SCHEDULE_COUNTS,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { CoordinatorRegistry, type RegisteredMember } from '../coordinator.registry';
import { getCoordinatorAdminToken, getStreamPublisherToken } from '../coordinator.tokens';
import type { HandlerCall, HandlerHook } from '../handler-hook';
import type { PublishOptions, StreamPublisher } from '../stream-publisher';
import { StreamListenerRegistry } from '../stream-listener.registry';
import { checkTimeout, DEFAULT_TIMEOUT_MS, LOOK_TIMEOUT_MS, waitUntil, within } from './deadline';
import { describeEntry, describeSeen } from './describe-entries';
import { type EntryRecord, EntryLog, outcomeOf, type SeenMessage } from './entry-log';
import { checkFailNextCount, type InjectedFailure, InjectedFailures } from './injected-failures';

/** A group of the application: `stream` may be left out when one stream of the application has a group of that name. */
export interface GroupRef {
  group: string;
  stream?: string;
}

/** An entry by id (a `publish` result fits); without `shardIndex`, an entry of that id in any shard. */
export interface EntryRef {
  id: string;
  shardIndex?: number;
}

/** An entry by id, or the first entry the group's handler was given that satisfies the predicate. */
export type EntryMatch = EntryRef | ((message: SeenMessage) => boolean);

export interface WaitOptions {
  /** How long to wait before rejecting with what was seen (default 10 000 ms). */
  timeoutMs?: number;
}

/** What a group did with an entry: its attempts, and for a dead letter the event. */
export type HandledEntry = EntryRecord;
export type DeadLetteredEntry = EntryRecord & { deadLetter: DeadLetterEvent };

interface AppGroup {
  stream: string;
  group: string;
  entries: RegisteredMember[];
}

function label(stream: string, group: string): string {
  return `group "${group}" of stream "${stream}"`;
}

function sameShards(a: number[], b: number[]): boolean {
  return a.length === b.length && [...a].sort((x, y) => x - y).every((shard, i) => shard === [...b].sort((x, y) => x - y)[i]);
}

/**
 * Test support for an application's listeners, whatever the test runner: attach it to the Nest
 * application (a `TestingModule` or an app, before or after `init()`), wait until every listener has
 * joined and owns its shards, publish, wait until a group handled or dead-lettered an entry, make a
 * listener fail, and wait until everything is drained. Every wait has a deadline and its error says
 * what the group was seen doing.
 *
 * @example
 * const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
 * const kit = CoordinatorTesting.attach(app);
 * await app.init();
 * await kit.ready();
 * kit.failNext({ group: 'billing' }, 2);
 * const sent = await kit.publish('orders', { key: 'o-1', payload: { orderId: 'o-1' } });
 * const handled = await kit.handled({ group: 'billing' }, sent); // on the third attempt
 * kit.detach();
 * await app.close();
 */
export class CoordinatorTesting {
  private readonly log = new EntryLog();
  private readonly failures = new InjectedFailures();
  private readonly hook: HandlerHook = (call) => this.around(call);
  private attached = true;

  private constructor(
    private readonly app: INestApplicationContext,
    private readonly registry: CoordinatorRegistry,
    private readonly listeners: StreamListenerRegistry,
  ) {
    listeners.setHandlerHook(this.hook);
    this.followMembers();
  }

  /** Starts watching the application's listeners; one kit per application at a time (`detach()` the last one first). */
  static attach(app: INestApplicationContext): CoordinatorTesting {
    const find = <T>(type: abstract new (...args: never[]) => T): T => {
      try {
        return app.get(type, { strict: false });
      } catch {
        throw new Error(`CoordinatorTesting.attach: the application has no ${type.name}: does it import CoordinatorModule.forRoot?`);
      }
    };
    return new CoordinatorTesting(app, find(CoordinatorRegistry), find(StreamListenerRegistry));
  }

  /** Stops watching and ends every injected failure; the handlers run as before. */
  detach(): void {
    if (!this.attached) return;
    this.attached = false;
    this.listeners.setHandlerHook(undefined);
    this.failures.clear();
    this.log.close();
  }

  /**
   * Resolves once every running listener and consumer of the application has joined its group, the
   * group is STABLE, and each readable shard is owned (the application's members own exactly what
   * the group says they own). Rejects at once for a member that stopped for good, and after the
   * deadline with what each group was seen doing.
   */
  async ready(options: WaitOptions = {}): Promise<void> {
    const timeoutMs = checkTimeout(options.timeoutMs, 'CoordinatorTesting.ready');
    let seen = 'nothing yet';
    await waitUntil(
      timeoutMs,
      async () => {
        const groups = this.groups((entry) => entry.desired === 'running');
        if (groups.length === 0)
          throw new Error('CoordinatorTesting.ready: the application has no running listener or consumer (was app.init() called?)');
        const waiting: string[] = [];
        for (const group of groups) {
          const problem = await this.notReady(group);
          if (problem) waiting.push(`${label(group.stream, group.group)}: ${problem}`);
        }
        seen = waiting.join('; ');
        return waiting.length === 0 ? true : undefined;
      },
      () => `CoordinatorTesting.ready: not every listener joined and owned its shards within ${timeoutMs} ms; last seen: ${seen}`,
    );
  }

  /** Publishes through the application's StreamPublisher (of `connection`, the default one unless named). */
  publish<T>(stream: string, message: OutgoingMessage<T>, options: PublishOptions & { connection?: string } = {}): Promise<SendResult> {
    const { connection, ...publishOptions } = options;
    const publisher = this.app.get<StreamPublisher>(getStreamPublisherToken(connection), { strict: false });
    return within(publisher.publish(stream, message, publishOptions), DEFAULT_TIMEOUT_MS, `CoordinatorTesting.publish to "${stream}"`);
  }

  /** Resolves once the group handled the entry (its acknowledgement landed); rejects at once if that entry was dead-lettered instead. */
  handled(ref: GroupRef, entry: EntryMatch, options: WaitOptions = {}): Promise<HandledEntry> {
    return this.outcome('handled', ref, entry, options);
  }

  /** Resolves once the group dead-lettered the entry; rejects at once if that entry was handled instead. */
  deadLettered(ref: GroupRef, entry: EntryMatch, options: WaitOptions = {}): Promise<DeadLetteredEntry> {
    return this.outcome('dead-lettered', ref, entry, options) as Promise<DeadLetteredEntry>;
  }

  /** What the group's handler was given, acknowledged and dead-lettered since the kit was attached, oldest first. */
  entries(ref: GroupRef): EntryRecord[] {
    const { stream, group } = this.resolve(ref, 'CoordinatorTesting.entries');
    return this.log.ofGroup(stream, group);
  }

  /**
   * Resolves once nothing is left to do: every group of the application has no backlog (nothing
   * unread, nothing pending, nothing waiting for a cutover), nothing waits in its streams' schedules
   * (delayed entries, the group's deferred retries: `releaseScheduled` makes them due now), and no
   * member has a handler running or entries buffered or held.
   */
  async drained(options: WaitOptions = {}): Promise<void> {
    const timeoutMs = checkTimeout(options.timeoutMs, 'CoordinatorTesting.drained');
    let seen = 'nothing yet';
    await waitUntil(
      timeoutMs,
      async () => {
        const busy: string[] = [];
        for (const group of this.groups(() => true)) {
          const problem = await this.notDrained(group);
          if (problem) busy.push(`${label(group.stream, group.group)}: ${problem}`);
        }
        seen = busy.join('; ');
        return busy.length === 0 ? true : undefined;
      },
      () => `CoordinatorTesting.drained: not drained within ${timeoutMs} ms; last seen: ${seen}`,
    );
  }

  /**
   * Makes every entry waiting in the stream's schedules due now, without sleeping: its delayed
   * entries and the deferred retries of the application's groups on it (only `group`'s with
   * `group`). Each shard's owner then releases them into the stream in its next turn (within about
   * its `blockMs`), as it would at their due time; wait for them with `handled` or `drained`.
   * Resolves with how many were made due. Built on `CoordinatorAdmin.releaseAllScheduled`.
   *
   * @example
   * const sent = await kit.publish('orders', { key: 'o-1', payload }, { delayMs: 3_600_000 });
   * await kit.releaseScheduled('orders');
   * await kit.handled({ group: 'billing' }, (m) => m.key === 'o-1');
   */
  async releaseScheduled(stream: string, options: { group?: string; connection?: string } = {}): Promise<number> {
    if (typeof stream !== 'string' || stream === '')
      throw new TypeError(`CoordinatorTesting.releaseScheduled: stream must be a stream prefix, got ${JSON.stringify(stream)}`);
    const groups =
      options.group !== undefined
        ? [this.resolve({ group: options.group, stream }, 'CoordinatorTesting.releaseScheduled').group]
        : [
            ...new Set(
              this.groups(() => true)
                .filter((g) => g.stream === stream)
                .map((g) => g.group),
            ),
          ];
    const admin = this.app.get<CoordinatorAdmin>(getCoordinatorAdminToken(options.connection), { strict: false });
    const where = `CoordinatorTesting.releaseScheduled of "${stream}"`;
    let count = await within(admin.releaseAllScheduled({ streamPrefix: stream }), DEFAULT_TIMEOUT_MS, where);
    for (const group of groups) {
      count += await within(admin.releaseAllScheduled({ streamPrefix: stream, consumerGroup: group }), DEFAULT_TIMEOUT_MS, where);
    }
    return count;
  }

  /**
   * The group's next `count` attempts fail with `error` (default: an InjectedFailureError saying so)
   * without running the handler: the member retries, backs off and dead-letters as it would for a
   * handler's own exception. `count` of `maxAttempts` or more dead-letters the next entry.
   */
  failNext(ref: GroupRef, count: number, error?: Error | string): InjectedFailure {
    checkFailNextCount(count);
    const { stream, group } = this.resolve(ref, 'CoordinatorTesting.failNext');
    return this.failures.add(stream, group, count, () => true, error, 'CoordinatorTesting.failNext');
  }

  /** Every attempt of an entry that satisfies `predicate` fails until `remove()` (so such entries are dead-lettered). */
  failWhen(ref: GroupRef, predicate: (message: SeenMessage) => boolean, error?: Error | string): InjectedFailure {
    if (typeof predicate !== 'function')
      throw new TypeError(`CoordinatorTesting.failWhen: predicate must be a function, got ${typeof predicate}`);
    const { stream, group } = this.resolve(ref, 'CoordinatorTesting.failWhen');
    return this.failures.add(stream, group, Infinity, predicate, error, 'CoordinatorTesting.failWhen');
  }

  /** The hook around each handler call: record the attempt, fail it when a rule says so, else run it. */
  private around(call: HandlerCall): unknown {
    this.log.follow(call.member);
    const { streamPrefix: stream, consumerGroup: group } = call.member.options;
    const messages: StreamMessage[] = Array.isArray(call.message) ? call.message : [call.message];
    let injected: Error | undefined;
    for (const message of messages) injected ??= this.failures.take(stream, group, message);
    const ends = messages.map((message) => this.log.attempt(call.member, message, injected !== undefined));
    const settle = (failed: boolean, error?: unknown) => {
      for (const end of ends) end(failed, error);
    };
    if (injected) {
      settle(true, injected);
      return Promise.reject(injected);
    }
    let result: unknown;
    try {
      result = call.run();
    } catch (error) {
      settle(true, error);
      throw error;
    }
    if (!(result instanceof Promise)) {
      settle(false);
      return result;
    }
    return result.then(
      (value: unknown) => {
        settle(false);
        return value;
      },
      (error: unknown) => {
        settle(true, error);
        throw error;
      },
    );
  }

  private outcome(want: 'handled' | 'dead-lettered', ref: GroupRef, entry: EntryMatch, options: WaitOptions): Promise<EntryRecord> {
    const where = `CoordinatorTesting.${want === 'handled' ? 'handled' : 'deadLettered'}`;
    const timeoutMs = checkTimeout(options.timeoutMs, where);
    const { stream, group } = this.resolve(ref, where);
    const byId = typeof entry !== 'function';
    if (byId && (typeof entry !== 'object' || entry === null || typeof entry.id !== 'string'))
      throw new TypeError(`${where}: entry must be { id, shardIndex? } (a publish result) or a predicate, got ${JSON.stringify(entry)}`);
    const matches = (record: EntryRecord): boolean =>
      byId
        ? record.id === entry.id && (entry.shardIndex === undefined || record.shardIndex === entry.shardIndex)
        : record.message !== undefined && entry(record.message);
    const what = byId
      ? `entry ${entry.id}${entry.shardIndex === undefined ? '' : ` of shard ${entry.shardIndex}`}`
      : 'an entry that matches';
    return waitUntil(
      timeoutMs,
      () => {
        this.followMembers();
        for (const record of this.log.ofGroup(stream, group)) {
          if (!matches(record)) continue;
          const outcome = outcomeOf(record);
          if (outcome === want) return record;
          if (byId && outcome !== 'pending')
            throw new Error(`${where}: ${label(stream, group)} ${outcome} ${what} instead: ${describeEntry(record)}`);
        }
        return undefined;
      },
      () => {
        const records = this.log.ofGroup(stream, group);
        const matching = records.filter((record) => {
          try {
            return matches(record);
          } catch {
            return false;
          }
        });
        const verb = want === 'handled' ? 'handle' : 'dead-letter';
        return `${where}: ${label(stream, group)} did not ${verb} ${what} within ${timeoutMs} ms; ${describeSeen(records, matching, this.log.forgotten)}`;
      },
      (wake) => this.log.onChange(wake),
    );
  }

  private async notReady({ stream, group, entries }: AppGroup): Promise<string | undefined> {
    const fatal = entries.find((entry) => entry.fatalError);
    if (fatal) throw new Error(`CoordinatorTesting.ready: member ${fatal.member.memberId} (${fatal.source}) ${fatal.fatalError}`);
    const joining = entries.filter((entry) => !entry.member.stats().joined).map((entry) => entry.member.memberId);
    if (joining.length > 0) return `${joining.join(', ')} not joined yet${await this.missingStream(entries[0], stream)}`;
    const description = await this.describe(entries[0], stream, group);
    if (typeof description === 'string') return description;
    if (description.group.state !== 'STABLE') return `the group is ${description.group.state}`;
    // A join taken while the member's renewals were not yet proven counts in the assignment only
    // once proven: until then the group is STABLE without it and it is granted nothing.
    const mine = new Set(entries.map((entry) => entry.member.memberId));
    const unproven = description.members.filter((m) => mine.has(m.memberId) && m.unprovenSince !== null).map((m) => m.memberId);
    if (unproven.length > 0) return `the joins of ${unproven.join(', ')} are not proven yet`;
    if (description.group.cutoverInProgress) return 'a cutover is in progress';
    const unowned = description.shards.filter((s) => s.readability === 'readable' && s.state !== 'OWNED');
    if (unowned.length > 0) return `shards ${unowned.map((s) => `${s.shardIndex} ${s.state}`).join(', ')}`;
    for (const { member } of entries) {
      const granted = description.shards.filter((s) => s.owner === member.memberId).map((s) => s.shardIndex);
      if (!sameShards(member.ownedShards(), granted))
        return `${member.memberId} reads shards [${member.ownedShards().join(', ')}], the group granted it [${granted.join(', ')}]`;
    }
    return undefined;
  }

  private async notDrained({ stream, group, entries }: AppGroup): Promise<string | undefined> {
    for (const { member } of entries) {
      const stats = member.stats();
      if (stats.activeHandlers + stats.bufferedEntries + stats.heldEntries > 0)
        return `${member.memberId} has ${stats.activeHandlers} handlers running, ${stats.bufferedEntries} entries buffered, ${stats.heldEntries} held`;
    }
    const description = await this.describe(entries[0], stream, group);
    if (typeof description === 'string') return description;
    const busy = description.shards.filter((s) => s.backlog > 0);
    if (busy.length > 0) return busy.map((s) => `shard ${s.shardIndex} lag ${s.lag} pending ${s.pending}`).join(', ');
    if (description.group.notYetReadableBacklog > 0)
      return `${description.group.notYetReadableBacklog} entries wait on shards not readable yet`;
    // What waits outside the stream is not done either: a deferred retry or a delayed entry runs later.
    const waiting = description.shards.filter((s) => SHARD_SCHEDULE_COUNTS.some((kind) => s[kind] > 0));
    if (waiting.length > 0)
      return `${waiting
        .map(
          (s) =>
            `shard ${s.shardIndex} ${SHARD_SCHEDULE_COUNTS.filter((kind) => s[kind] > 0)
              .map((kind) => `${kind} ${s[kind]}`)
              .join(' ')}`,
        )
        .join(', ')} (in the schedules: kit.releaseScheduled(${JSON.stringify(stream)}) makes them due now)`;
    return undefined;
  }

  /** Why members may never join: their stream does not exist (no `shardCount` to create it with), or '' . */
  private async missingStream(entry: RegisteredMember, stream: string): Promise<string> {
    try {
      const found = await within(this.admin(entry).describeStream(stream), LOOK_TIMEOUT_MS, 'describeStream');
      return found ? '' : ` (stream "${stream}" does not exist: give the listener shardCount, or create the stream)`;
    } catch {
      return '';
    }
  }

  private admin(entry: RegisteredMember): CoordinatorAdmin {
    return this.app.get<CoordinatorAdmin>(getCoordinatorAdminToken(entry.connection.name), { strict: false });
  }

  /** The group as Redis describes it, or why it could not be read (a group not created yet is not an error to stop at). */
  private async describe(entry: RegisteredMember, stream: string, group: string): Promise<GroupDescription | string> {
    try {
      return await within(this.admin(entry).describeGroup(stream, group), LOOK_TIMEOUT_MS, 'describeGroup');
    } catch (error) {
      return `describeGroup failed: ${(error as Error).message}`;
    }
  }

  /** The application's groups, with the members that `include` keeps; members made since are followed too. */
  private groups(include: (entry: RegisteredMember) => boolean): AppGroup[] {
    this.followMembers();
    const groups = new Map<string, AppGroup>();
    for (const entry of this.registry.entries()) {
      if (!include(entry)) continue;
      const { streamPrefix: stream, consumerGroup: group } = entry.member.options;
      const key = JSON.stringify([entry.connection.name, stream, group]);
      let found = groups.get(key);
      if (!found) groups.set(key, (found = { stream, group, entries: [] }));
      found.entries.push(entry);
    }
    return [...groups.values()];
  }

  private followMembers(): void {
    if (!this.attached) throw new Error('CoordinatorTesting: this kit was detached; attach a new one');
    for (const member of this.registry.members()) this.log.follow(member);
  }

  /** The stream and group a ref names, checked against the application's members: a typo fails at once, naming what exists. */
  private resolve(ref: GroupRef, where: string): { stream: string; group: string } {
    if (typeof ref !== 'object' || ref === null || typeof ref.group !== 'string')
      throw new TypeError(`${where}: expected { group, stream? }, got ${JSON.stringify(ref)}`);
    const all = this.groups(() => true);
    const found = all.filter((g) => g.group === ref.group && (ref.stream === undefined || g.stream === ref.stream));
    const known = all.map((g) => `${g.group} (${g.stream})`).join(', ') || 'none';
    if (found.length === 0)
      throw new Error(
        `${where}: the application has no listener of group "${ref.group}"${ref.stream ? ` on stream "${ref.stream}"` : ''}; its groups: ${known}`,
      );
    const streams = [...new Set(found.map((g) => g.stream))];
    if (streams.length > 1) throw new Error(`${where}: group "${ref.group}" reads several streams (${streams.join(', ')}): give stream`);
    return { stream: found[0].stream, group: ref.group };
  }
}
