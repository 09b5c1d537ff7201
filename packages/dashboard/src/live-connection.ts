import type { ServerResponse } from 'node:http';

/**
 * Bytes a live stream may write to a client that does not read, beyond the message it was stuck
 * on: events and keepalives (snapshots are skipped, see LiveConnection). 1 MiB holds thousands of
 * events; a client further behind than that is better served by reconnecting (its EventSource does,
 * and gets a fresh `hello`) than by a server that keeps its backlog.
 */
export const MAX_LIVE_BACKLOG_BYTES = 1024 * 1024;
/**
 * How long a live stream may wait for its client to read before it is dropped: a browser that
 * stopped reading for this long (a half-open connection, a suspended laptop) holds a connection
 * slot and its buffers for nothing. Four keepalive intervals.
 */
export const LIVE_STALL_MS = 60_000;
/** Server-sent comment lines keep proxies from closing an idle live stream. */
export const KEEPALIVE_MS = 15_000;

/** What a live connection reports to the dashboard's stats. */
export interface LiveConnectionStats {
  /** Snapshots not sent because the client had not read the previous ones (the latest is sent when it does). */
  skippedSnapshots: number;
  /** Connections dropped because their client did not read (over MAX_LIVE_BACKLOG_BYTES, or stalled LIVE_STALL_MS). */
  droppedSlowClients: number;
}

/**
 * One browser's live stream, honouring back-pressure (SPEC 10.3): while the client has not read
 * what was written (`write()` said false, no `drain` yet), a new snapshot replaces the unsent one
 * instead of piling up (a snapshot of a 3,000-shard group is about a megabyte, every refresh), and
 * events still go out; a client that lets MAX_LIVE_BACKLOG_BYTES more pile up, or reads nothing for
 * LIVE_STALL_MS, is dropped. What the server holds for one connection is therefore at most the
 * message it was stuck on, one unsent snapshot and MAX_LIVE_BACKLOG_BYTES.
 */
export class LiveConnection {
  /** Since when the client has not read what was written; undefined while it keeps up. */
  private stalledSince: number | undefined;
  /** Bytes written since the client stopped keeping up. */
  private backlogBytes = 0;
  /** The latest snapshot not sent while the client was behind. */
  private unsentSnapshot: string | undefined;
  private readonly keepalive: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly response: ServerResponse,
    private readonly counters: LiveConnectionStats,
  ) {
    response.on('drain', () => this.drained());
    this.keepalive = setInterval(() => this.tick(), KEEPALIVE_MS);
    this.keepalive.unref();
  }

  /** Whether the client is behind (its output waits for it to read). */
  get isBehind(): boolean {
    return this.stalledSince !== undefined;
  }

  /** Bytes the server holds for this client: unsent output and the skipped snapshot. */
  get bufferedBytes(): number {
    return this.response.writableLength + (this.unsentSnapshot?.length ?? 0);
  }

  send(event: string, data: unknown): void {
    if (this.closed) return;
    const text = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    if (this.stalledSince !== undefined && event === 'snapshot') {
      if (this.unsentSnapshot !== undefined) this.counters.skippedSnapshots += 1;
      this.unsentSnapshot = text;
      return;
    }
    this.write(text);
  }

  /** Stops the keepalive; the owner calls it when the response closes. */
  close(): void {
    this.closed = true;
    clearInterval(this.keepalive);
  }

  private write(text: string): void {
    if (this.stalledSince !== undefined) {
      this.backlogBytes += Buffer.byteLength(text);
      if (this.backlogBytes > MAX_LIVE_BACKLOG_BYTES) {
        this.drop();
        return;
      }
    }
    if (!this.response.write(text) && this.stalledSince === undefined) {
      this.stalledSince = Date.now();
      this.backlogBytes = 0;
    }
  }

  private drained(): void {
    if (this.closed) return;
    this.stalledSince = undefined;
    this.backlogBytes = 0;
    const snapshot = this.unsentSnapshot;
    this.unsentSnapshot = undefined;
    if (snapshot !== undefined) this.write(snapshot);
  }

  private tick(): void {
    if (this.stalledSince !== undefined && Date.now() - this.stalledSince >= LIVE_STALL_MS) {
      this.drop();
      return;
    }
    // A keepalive only while the client keeps up: one that is behind has bytes to read already.
    if (this.stalledSince === undefined) this.write(': keepalive\n\n');
  }

  private drop(): void {
    if (this.closed) return;
    this.counters.droppedSlowClients += 1;
    this.close();
    this.response.destroy();
  }
}
