import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KEEPALIVE_MS, LIVE_STALL_MS, LiveConnection, type LiveConnectionStats, MAX_LIVE_BACKLOG_BYTES } from './live-connection';

/** A response whose client reads only when told: write() says false once `highWaterMark` bytes wait. */
class SlowResponse extends EventEmitter {
  writableLength = 0;
  destroyed = false;
  readonly written: string[] = [];
  constructor(private readonly highWaterMark = 100) {
    super();
  }
  write(text: string): boolean {
    this.written.push(text);
    this.writableLength += Buffer.byteLength(text);
    return this.writableLength < this.highWaterMark;
  }
  /** The client reads everything. */
  read(): void {
    this.writableLength = 0;
    this.emit('drain');
  }
  destroy(): void {
    this.destroyed = true;
  }
}

function aConnection(highWaterMark?: number) {
  const response = new SlowResponse(highWaterMark);
  const counters: LiveConnectionStats = { skippedSnapshots: 0, droppedSlowClients: 0 };
  const connection = new LiveConnection(response as unknown as ServerResponse, counters);
  const events = () => response.written.map((text) => /^event: (\w+)/.exec(text)?.[1] ?? text.trim());
  return { response, counters, connection, events };
}

describe('LiveConnection: output to a slow client honours back-pressure, with a bound per connection (SPEC 10.3)', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('while the client is behind, a new snapshot replaces the unsent one; the latest goes out when it reads', () => {
    const { response, counters, connection, events } = aConnection();
    connection.send('snapshot', 'x'.repeat(200)); // fills the buffer: behind
    expect(connection.isBehind).toBe(true);
    connection.send('snapshot', 2);
    connection.send('snapshot', 3);
    connection.send('events', ['e']);
    expect(events()).toEqual(['snapshot', 'events']);
    expect(counters.skippedSnapshots).toBe(1);
    response.read();
    expect(events()).toEqual(['snapshot', 'events', 'snapshot']);
    expect(response.written.at(-1)).toContain('data: 3');
    expect(connection.isBehind).toBe(false);
  });

  it('a client behind by more than MAX_LIVE_BACKLOG_BYTES is dropped', () => {
    const { response, counters, connection } = aConnection();
    connection.send('snapshot', 'x'.repeat(200));
    const event = 'e'.repeat(64 * 1024);
    for (let sent = 0; sent <= MAX_LIVE_BACKLOG_BYTES; sent += event.length) connection.send('events', [event]);
    expect(response.destroyed).toBe(true);
    expect(counters.droppedSlowClients).toBe(1);
    expect(response.writableLength).toBeLessThanOrEqual(200 + MAX_LIVE_BACKLOG_BYTES + 64);
  });

  it('a client that reads nothing for LIVE_STALL_MS is dropped; one that keeps up gets keepalives', () => {
    const reading = aConnection();
    vi.advanceTimersByTime(KEEPALIVE_MS);
    expect(reading.events()).toEqual([': keepalive']);
    const stalled = aConnection();
    stalled.connection.send('snapshot', 'x'.repeat(200));
    vi.advanceTimersByTime(LIVE_STALL_MS - KEEPALIVE_MS);
    expect(stalled.response.destroyed).toBe(false);
    expect(stalled.events()).toEqual(['snapshot']); // no keepalive while behind
    vi.advanceTimersByTime(KEEPALIVE_MS);
    expect(stalled.response.destroyed).toBe(true);
    expect(stalled.counters.droppedSlowClients).toBe(1);
    reading.connection.close();
  });
});
