import type { CoordinatedMember, DeadLetterEvent, StreamMessage } from '@redis-stream-coordinator/core';

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
}

/** Handled: acknowledged and not dead-lettered. */
export function outcomeOf(record: EntryRecord): 'handled' | 'dead-lettered' | 'pending' {
  if (record.deadLetter) return 'dead-lettered';
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
    member.on('acknowledged', onAck);
    member.on('dead-letter', onDeadLetter);
    this.detachers.set(member, () => {
      member.off('acknowledged', onAck);
      member.off('dead-letter', onDeadLetter);
    });
  }

  /** A handler call starts: returns what to call with its outcome (`failed`, and the error it failed with). */
  attempt(member: CoordinatedMember, message: StreamMessage, injected: boolean): (failed: boolean, error?: unknown) => void {
    const { streamPrefix: stream, consumerGroup: group } = member.options;
    const record = this.record(stream, group, message.shardIndex, message.id);
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

  private record(stream: string, group: string, shardIndex: number, id: string): EntryRecord {
    const key = entryKey(stream, group, shardIndex, id);
    let record = this.records.get(key);
    if (!record) {
      record = { stream, group, id, shardIndex, message: undefined, attempts: [], acknowledged: false, deadLetter: undefined };
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
