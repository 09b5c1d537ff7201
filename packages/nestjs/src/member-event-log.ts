import type { Logger } from '@nestjs/common';
import type { CoordinatedMember } from '@redis-stream-coordinator/core';

/**
 * Lines of one kind written per window; past it, events of that kind are only counted, and the
 * window ends with one summary line. A rebalance of a few members, or a poison entry now and then,
 * is logged line by line; a storm (hundreds of dead letters a second, members flapping while Redis
 * is away) cannot flood the application's log.
 */
export const MAX_EVENT_LINES_PER_WINDOW = 20;
/** The window of MAX_EVENT_LINES_PER_WINDOW. */
export const EVENT_LOG_WINDOW_MS = 10_000;
/** Shard indices listed on one line (a member may own up to thousands): past it, the count. */
const MAX_LISTED_SHARDS = 32;
/** Characters of a handler's error quoted on a dead-letter line (the whole error is in the dead letter). */
const MAX_REASON_LENGTH = 200;

/** The kinds of lines, in the order a summary names them. */
const KINDS = {
  assigned: 'shards assigned',
  revoked: 'shards given up',
  'dead-letter': 'dead letters',
  fenced: 'fences',
  'lease-lost': 'lost leases',
} as const;
type EventKind = keyof typeof KINDS;

/**
 * Logs what an operator wants to hear about without polling `/group` or running `rsc events`: each
 * member's rebalances (shards assigned and given up, as `log`), its dead letters, fences and lost
 * leases (as `warn`). One line per event, at most MAX_EVENT_LINES_PER_WINDOW of a kind per
 * EVENT_LOG_WINDOW_MS for the whole application, then one summary line of what was left out.
 */
export class MemberEventLog {
  private windowStartedAt: number;
  private readonly written = new Map<EventKind, number>();
  private readonly leftOut = new Map<EventKind, number>();
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {
    this.windowStartedAt = now();
  }

  /** Logs this member's events from now on (`source`: where it came from, e.g. `@StreamListener on A.b`). */
  watch(member: CoordinatedMember, source: string): void {
    const who = `member ${member.memberId} (${source})`;
    const of = `of ${member.options.streamPrefix}/${member.options.consumerGroup}`;
    member.on('assigned', ({ shards, memberEpoch }) =>
      this.write('assigned', `${who} was assigned ${shardList(shards)} ${of} (memberEpoch ${memberEpoch})`),
    );
    member.on('revoked', ({ shards, memberEpoch }) =>
      this.write('revoked', `${who} gave up ${shardList(shards)} ${of} (memberEpoch ${memberEpoch})`),
    );
    member.on('dead-letter', (event) =>
      this.write(
        'dead-letter',
        `${who} dead-lettered entry ${event.id} of shard ${event.shardIndex} ${of} (${event.cause} after ${event.attempts} attempt(s)): ${quote(event.reason)} (rsc dead-letters ${member.options.streamPrefix} ${event.destination} list)`,
      ),
    );
    member.on('fenced', (event) =>
      this.write('fenced', `${who} was fenced (${event.errorCode}) and dropped ${shardList(event.shards)}; it rejoins`),
    );
    member.on('lease-lost', (event) =>
      this.write(
        'lease-lost',
        `${who} lost its lease: no heartbeat got through for ${event.sinceLastHeartbeatMs} ms, it stopped reading ${shardList(event.shards)}; it rejoins when Redis answers`,
      ),
    );
  }

  /** Writes the summary of what the window left out, if anything, and stops its timer (at shutdown). */
  close(): void {
    this.endWindow();
  }

  private write(kind: EventKind, line: string): void {
    if (this.now() - this.windowStartedAt >= EVENT_LOG_WINDOW_MS) this.endWindow();
    const written = this.written.get(kind) ?? 0;
    if (written < MAX_EVENT_LINES_PER_WINDOW) {
      this.written.set(kind, written + 1);
      if (kind === 'assigned' || kind === 'revoked') this.logger.log(line);
      else this.logger.warn(line);
      return;
    }
    this.leftOut.set(kind, (this.leftOut.get(kind) ?? 0) + 1);
    // The summary comes when the window ends, even if no further event does.
    this.flushTimer ??= setTimeout(() => this.endWindow(), Math.max(0, this.windowStartedAt + EVENT_LOG_WINDOW_MS - this.now()));
    this.flushTimer.unref();
  }

  private endWindow(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const leftOut = (Object.keys(KINDS) as EventKind[]).filter((kind) => this.leftOut.has(kind));
    if (leftOut.length > 0) {
      const total = leftOut.reduce((sum, kind) => sum + this.leftOut.get(kind)!, 0);
      const seconds = Math.round((this.now() - this.windowStartedAt) / 1000);
      this.logger.warn(
        `${total} more member event(s) in the last ${seconds} s were not logged (${leftOut.map((kind) => `${KINDS[kind]} ${this.leftOut.get(kind)}`).join(', ')}; at most ${MAX_EVENT_LINES_PER_WINDOW} lines of each kind per ${EVENT_LOG_WINDOW_MS / 1000} s): rsc events and rsc dead-letters show them all`,
      );
    }
    this.written.clear();
    this.leftOut.clear();
    this.windowStartedAt = this.now();
  }
}

/** `shards 0-3, 7`, ranges folded, at most MAX_LISTED_SHARDS indices named. */
function shardList(shards: readonly number[]): string {
  if (shards.length === 0) return 'no shards';
  const sorted = [...shards].sort((a, b) => a - b);
  const listed = sorted.slice(0, MAX_LISTED_SHARDS);
  const ranges: string[] = [];
  for (let i = 0; i < listed.length; ) {
    let j = i;
    while (j + 1 < listed.length && listed[j + 1] === listed[j] + 1) j++;
    ranges.push(j > i ? `${listed[i]}-${listed[j]}` : `${listed[i]}`);
    i = j + 1;
  }
  const more = sorted.length > listed.length ? ` and ${sorted.length - listed.length} more` : '';
  return `${sorted.length === 1 ? 'shard' : 'shards'} ${ranges.join(', ')}${more}`;
}

/** A handler's error on one line, shortened. */
function quote(reason: string): string {
  const line = String(reason).replace(/\s+/g, ' ').trim();
  return line.length > MAX_REASON_LENGTH ? `${line.slice(0, MAX_REASON_LENGTH)}…` : line;
}
