import type { CoordinatedMember, DeadLetterEvent, DeferredEvent, ParkedEvent, StreamMessage } from '@redis-stream-coordinator/core';

/**
 * The most entries the log keeps per kit: a test that publishes more forgets the oldest (and its
 * timeout messages say so) rather than growing without bound.
 */
export const MAX_LOGGED_ENTRIES = 100_000;

/** What the handler was given, without the live parts (signal, ack). */
export interface SeenMessage {
  id: string;
  shardIndex: number;
  key: string | undefined;
  payload: unknown;
  headers: Record<string, string>;
}

/** One handler call of the entry. */
export interface Attempt {
  memberId: string;
  outcome: 'running' | 'succeeded' | 'failed';
  /** The error's `name: message`, when it failed. */
  error?: string;
  /** Whether the failure was one the kit injected (`failNext`, `failWhen`) rather than the handler's own. */
  injected: boolean;
}

/** What a group did with one entry, as far as its members in this application saw. */
export interface EntryRecord {
  stream: string;
  group: string;
  id: string;
  shardIndex: number;
  /** Undefined when no handler was called with it (an entry dead-lettered before its handler ran, e.g. one its schema refused). */
  message: SeenMessage | undefined;
  attempts: Attempt[];
  /** Its acknowledgement landed (a dead-lettered entry is acknowledged too). */
  acknowledged: boolean;
  /** Set when it was moved to the dead-letter stream. */
  deadLetter: DeadLetterEvent | undefined;
  /**
   * Set while a failed attempt waits in the group's deferred schedule (`retryMode: 'deferred'`):
   * its acknowledgement does not make it handled. Its retry, released later under a new stream id,
   * is told in this same record (its attempts, its outcome): `retriedAs` has the ids it came back as.
   */
  deferred: DeferredEvent | undefined;
  /**
   * Set while it waits behind its key's deferred retry (`deferredOrder: 'key'`): parked in the
   * group's schedule, or appended again at the stream end (`dueAt` 0). Acknowledged, yet not handled:
   * its copy, under a new stream id, is told in this same record (`retriedAs`).
   */
  parked: ParkedEvent | undefined;
  retriedAs: string[];
}

/** Handled: acknowledged and not dead-lettered, nor waiting in a deferred schedule. */
export function outcomeOf(record: EntryRecord): 'handled' | 'dead-lettered' | 'pending' {
  if (record.deadLetter) return 'dead-lettered';
  if (record.deferred || record.parked) return 'pending';
  return record.acknowledged ? 'handled' : 'pending';
}

export function groupKey(stream: string, group: string): string {
  return JSON.stringify([stream, group]);
}

function entryKey(stream: string, group: string, shardIndex: number, id: string): string {
  return JSON.stringify([stream, group, shardIndex, id]);
}

/**
 * Every entry the application's members were given, acknowledged or dead-lettered since the kit was
 * attached, per group; `onChange` listeners hear of each change (the waits re-check then).
 */
export class EntryLog {
  private readonly records = new Map<string, EntryRecord>();
  /** A released deferred retry's key -> the record of the entry it retries (see `attempt`). */
  private readonly retries = new Map<string, EntryRecord>();
  private readonly listeners = new Set<() => void>();
  private readonly detachers = new Map<CoordinatedMember, () => void>();
  /** How many records were dropped for MAX_LOGGED_ENTRIES. */
  forgotten = 0;

  /** Listens to a member's acknowledgements and dead letters (once per member). */
  follow(member: CoordinatedMember): void {
    if (this.detachers.has(member)) return;
    const { streamPrefix: stream, consumerGroup: group } = member.options;
    const onAck = (event: { shardIndex: number; ids: string[]; accepted: boolean }) => {
      if (!event.accepted) return;
      for (const id of event.ids) this.record(stream, group, event.shardIndex, id).acknowledged = true;
      this.changed();
    };
    const onDeadLetter = (event: DeadLetterEvent) => {
      this.record(stream, group, event.shardIndex, event.id).deadLetter = event;
      this.changed();
    };
    const onDeferred = (event: DeferredEvent) => {
      this.record(stream, group, event.shardIndex, event.id).deferred = event;
      this.changed();
    };
    const onParked = (event: ParkedEvent) => {
      this.record(stream, group, event.shardIndex, event.id).parked = event;
      this.changed();
    };
    member.on('acknowledged', onAck);
    member.on('dead-letter', onDeadLetter);
    member.on('deferred', onDeferred);
    member.on('parked', onParked);
    this.detachers.set(member, () => {
      member.off('acknowledged', onAck);
      member.off('dead-letter', onDeadLetter);
      member.off('deferred', onDeferred);
      member.off('parked', onParked);
    });
  }

  /** A handler call starts: returns what to call with its outcome (`failed`, and the error it failed with). */
  attempt(member: CoordinatedMember, message: StreamMessage, injected: boolean): (failed: boolean, error?: unknown) => void {
    const { streamPrefix: stream, consumerGroup: group } = member.options;
    const record = this.retryOf(stream, group, message) ?? this.record(stream, group, message.shardIndex, message.id);
    record.message ??= {
      id: message.id,
      shardIndex: message.shardIndex,
      key: message.key,
      payload: message.payload,
      headers: message.headers,
    };
    const attempt: Attempt = { memberId: member.memberId, outcome: 'running', injected };
    record.attempts.push(attempt);
    this.changed();
    return (failed, error) => {
      attempt.outcome = failed ? 'failed' : 'succeeded';
      if (failed) attempt.error = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      this.changed();
    };
  }

  /** The group's records, oldest first. */
  ofGroup(stream: string, group: string): EntryRecord[] {
    return [...this.records.values()].filter((r) => r.stream === stream && r.group === group);
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    for (const detach of this.detachers.values()) detach();
    this.detachers.clear();
    this.listeners.clear();
  }

  /**
   * The record of the deferred or parked entry that `message` is the copy of, linked to its new id
   * from now on, or undefined; only for a message the log has not seen. A copy carries no id of the
   * entry it copies (only its fields and attempt count), so it is recognised as the oldest such
   * record of its group, shard and key: a released retry (past its first delivery) by the same
   * payload; a parked entry's copy (released or appended again) by its delivery (its attempts + 1)
   * and, when a handler saw it before, its payload. A key's parked entries come back in their order,
   * behind its retry, so the oldest is the one.
   */
  private retryOf(stream: string, group: string, message: StreamMessage): EntryRecord | undefined {
    const key = entryKey(stream, group, message.shardIndex, message.id);
    const linked = this.retries.get(key);
    if (linked || this.records.has(key)) return linked;
    const payload = JSON.stringify(message.payload);
    for (const record of this.records.values()) {
      if (record.stream !== stream || record.group !== group || record.shardIndex !== message.shardIndex) continue;
      const copied = record.deferred
        ? message.deliveryCount >= 2 && record.message?.key === message.key && JSON.stringify(record.message?.payload) === payload
        : record.parked !== undefined &&
          record.parked.key === message.key &&
          message.deliveryCount === record.parked.attempts + 1 &&
          (record.message === undefined || JSON.stringify(record.message.payload) === payload);
      if (!copied) continue;
      record.deferred = undefined;
      record.parked = undefined;
      record.acknowledged = false; // the deferral's own acknowledgement; the retry's is what counts now
      record.retriedAs.push(message.id);
      this.retries.set(key, record);
      if (this.retries.size > MAX_LOGGED_ENTRIES) this.retries.delete(this.retries.keys().next().value!);
      return record;
    }
    return undefined;
  }

  private record(stream: string, group: string, shardIndex: number, id: string): EntryRecord {
    const key = entryKey(stream, group, shardIndex, id);
    const retried = this.retries.get(key);
    if (retried) return retried;
    let record = this.records.get(key);
    if (!record) {
      record = {
        stream,
        group,
        id,
        shardIndex,
        message: undefined,
        attempts: [],
        acknowledged: false,
        deadLetter: undefined,
        deferred: undefined,
        parked: undefined,
        retriedAs: [],
      };
      this.records.set(key, record);
      if (this.records.size > MAX_LOGGED_ENTRIES) {
        this.records.delete(this.records.keys().next().value!);
        this.forgotten += 1;
      }
    }
    return record;
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }
}
