import { EventEmitter } from 'node:events';
import { checkOption } from '../protocol/option-ranges';
import { TrimError, type TrimResult } from './retention';

/** Options of `CoordinatorAdmin.startTrimming`. */
export interface PeriodicTrimOptions {
  /** Pause between the end of one run and the start of the next (runs never overlap). 100 ms to a day. */
  intervalMs: number;
  /** As `TrimOptions.maxLen`: for shards no consumer group reads, keep at most this many newest entries. */
  maxLen?: number;
  /**
   * A run still going after this long is reported ('error', `stats().overdue`): a Redis reply that
   * is late or lost. The next run waits for it, and `stop()` waits for it no longer than this.
   * Default: 30000 ms or `intervalMs`, whichever is larger.
   */
  runTimeoutMs?: number;
}

/** One finished run: its result, and when it started and ended (epoch ms). */
export interface TrimRun {
  result: TrimResult;
  startedAt: number;
  finishedAt: number;
}

export interface TrimScheduleStats {
  streamPrefix: string;
  /** Runs started. */
  runs: number;
  succeeded: number;
  failed: number;
  /** Failed runs in a row (0 after a success): what a health check looks at. */
  consecutiveFailures: number;
  /** A run is going on now. */
  running: boolean;
  /** The run going on now has passed `runTimeoutMs`. */
  overdue: boolean;
  /** `stop()` was called: no run starts any more. */
  stopped: boolean;
  lastRun: TrimRun | undefined;
  lastError: Error | undefined;
  /** Entries deleted by every run so far. */
  trimmed: number;
}

export interface TrimScheduleEvents {
  /** A run finished (every shard trimmed or left alone). */
  trimmed: [TrimRun];
  /**
   * A run failed (a `TrimError` says which shards, the others were trimmed; a `GroupNotFoundError`
   * when the stream has no metadata; a Redis error), or is overdue. The schedule goes on. As with
   * every EventEmitter, an 'error' without a listener throws: listen for it.
   */
  error: [Error];
}

/**
 * A periodic `trim` of one stream (`CoordinatorAdmin.startTrimming`): one run at a time, the next
 * `intervalMs` after the previous one ended, each result a 'trimmed' event and each failure an
 * 'error', both in `stats()`. `stop()` ends it.
 */
export class TrimSchedule extends EventEmitter<TrimScheduleEvents> {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;
  private currentDeadline = 0;
  private readonly state: Omit<TrimScheduleStats, 'streamPrefix' | 'stopped' | 'running'> = {
    runs: 0,
    succeeded: 0,
    failed: 0,
    consecutiveFailures: 0,
    overdue: false,
    lastRun: undefined,
    lastError: undefined,
    trimmed: 0,
  };
  private stopped = false;

  /** @internal use `CoordinatorAdmin.startTrimming` */
  constructor(
    readonly streamPrefix: string,
    private readonly trim: () => Promise<TrimResult>,
    readonly intervalMs: number,
    readonly runTimeoutMs: number,
  ) {
    super();
    // The first run on the next turn of the event loop, so that the caller can listen for 'error' first.
    this.schedule(0);
  }

  stats(): TrimScheduleStats {
    return { streamPrefix: this.streamPrefix, ...this.state, running: this.current !== undefined, stopped: this.stopped };
  }

  /**
   * No run starts any more. Resolves when the run going on (if any) has ended, or at its
   * `runTimeoutMs` deadline if a Redis reply keeps it longer (it ends on its own later; its
   * result is still reported).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    const running = this.current;
    if (!running) return;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, this.currentDeadline - Date.now()));
    });
    await Promise.race([running, deadline]);
    clearTimeout(timer);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      // A 'trimmed' listener that throws is reported like a failed run.
      this.current = this.run()
        .catch((error: unknown) => this.report(error instanceof Error ? error : new Error(String(error))))
        .finally(() => {
          this.current = undefined;
          this.schedule(this.intervalMs);
        });
    }, delayMs);
  }

  private async run(): Promise<void> {
    const startedAt = Date.now();
    this.state.runs += 1;
    this.state.overdue = false;
    this.currentDeadline = startedAt + this.runTimeoutMs;
    const watchdog = setTimeout(() => {
      this.state.overdue = true;
      this.report(
        new Error(
          `trimming stream "${this.streamPrefix}": the run started ${this.runTimeoutMs} ms ago has not finished (a Redis reply late or lost); the next run waits for it`,
        ),
      );
    }, this.runTimeoutMs);
    let run: TrimRun | undefined;
    try {
      const result = await this.trim();
      run = { result, startedAt, finishedAt: Date.now() };
      this.state.succeeded += 1;
      this.state.consecutiveFailures = 0;
      this.state.lastRun = run;
      this.state.trimmed += result.trimmed;
    } catch (error) {
      const failure = error instanceof Error ? error : new Error(String(error));
      this.state.failed += 1;
      this.state.consecutiveFailures += 1;
      this.state.lastError = failure;
      // Some shards failed, the others were trimmed: that part counts.
      if (failure instanceof TrimError) {
        this.state.lastRun = { result: failure.result, startedAt, finishedAt: Date.now() };
        this.state.trimmed += failure.result.trimmed;
      }
      this.report(failure);
    } finally {
      clearTimeout(watchdog);
      this.state.overdue = false;
    }
    if (run) this.emit('trimmed', run);
  }

  private report(error: Error): void {
    // No listener: Node's rule throws the error; here it would throw inside a timer and take the
    // process down, like an unhandled 'error' of a member. Said in the JSDoc of the event.
    this.emit('error', error);
  }
}

/** Checks `startTrimming`'s options, naming the one that is wrong. */
export function resolvePeriodicTrimOptions(options: PeriodicTrimOptions): {
  intervalMs: number;
  maxLen: number | undefined;
  runTimeoutMs: number;
} {
  if (options === null || typeof options !== 'object') throw new TypeError('startTrimming options must be an object with intervalMs');
  const intervalMs = checkOption('admin.startTrimming.intervalMs', options.intervalMs);
  const maxLen = options.maxLen === undefined ? undefined : checkOption('admin.trim.maxLen', options.maxLen);
  const runTimeoutMs = checkOption('admin.startTrimming.runTimeoutMs', options.runTimeoutMs ?? Math.max(30_000, intervalMs));
  return { intervalMs, maxLen, runTimeoutMs };
}
