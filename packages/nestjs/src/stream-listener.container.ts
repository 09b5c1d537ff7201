import { checkOption, type CoordinatedMember, OPTION_RANGES } from '@redis-stream-coordinator/core';
import type { CoordinatorRegistry, RegisteredMember } from './coordinator.registry';

/** The most members one @StreamListener may run (`concurrency`; its row in the core's OPTION_RANGES). */
export const MAX_LISTENER_CONCURRENCY: number = OPTION_RANGES['nestjs.concurrency'].max;

/** `listener`: a @StreamListener (or `registerListener`), N members; `consumer`: a bean consumer, one member. */
export type StreamListenerKind = 'listener' | 'consumer';

/**
 * Runtime control of one listener or bean consumer, from `StreamListenerRegistry.get(id)` (Spring's
 * `MessageListenerContainer`). `start()`, `stop()` and `setConcurrency()` run one at a time, in the
 * order they were called; `pause()` and `resume()` act at once.
 *
 * @example
 * const summaries = registry.get('summaries')!;
 * summaries.pause();               // members keep their shards and heartbeats, fetch nothing
 * summaries.resume();
 * await summaries.setConcurrency(8); // a listener: members -m4 … -m7 join through a rebalance
 * await summaries.stop();          // drain, acknowledge, leave
 * await summaries.start();         // join again
 */
export class StreamListenerContainer {
  private running: boolean;
  private paused = false;
  private queue: Promise<unknown> = Promise.resolve();

  /** @internal Made by StreamListenerRegistry. */
  constructor(
    /** The id given to `get(id)`. */
    readonly id: string,
    readonly kind: StreamListenerKind,
    /** Where it came from, for messages: `@StreamListener on SummaryHandlers.onSummary`, `bean auditConsumer`. */
    readonly source: string,
    private readonly registry: CoordinatorRegistry,
    private readonly entries: RegisteredMember[],
    autoStartup: boolean,
    /** A listener's member `-m<index>`, created and registered (stopped). */
    private readonly createMember?: (index: number) => Promise<RegisteredMember>,
  ) {
    this.running = autoStartup;
  }

  /** The container's members now (a listener's in `-mK` order). */
  members(): CoordinatedMember[] {
    return this.entries.map((entry) => entry.member);
  }

  /** Whether it should run: started (at bootstrap with autoStartup, or by `start()`) and not stopped since. Its members may still be joining. */
  isRunning(): boolean {
    return this.running;
  }

  isPaused(): boolean {
    return this.paused;
  }

  /** A listener's number of members; a bean consumer's `runtimeMaxConcurrency`. */
  get concurrency(): number {
    return this.kind === 'listener' ? this.entries.length : this.entries[0].member.options.runtimeMaxConcurrency;
  }

  /**
   * Starts (or starts again) every member: they join their group, as at bootstrap. Resolves when
   * each has joined; while Redis cannot be reached they retry in the background (`startRetryDelayMs`)
   * and the promise waits, so bound it yourself where a caller waits on it.
   */
  start(): Promise<void> {
    return this.serially(async () => {
      this.running = true;
      await Promise.all(this.entries.map((entry) => this.registry.start(entry)));
    });
  }

  /** Stops every member: in-flight handlers finish (`shutdownTimeoutMs`), acknowledgements land, the members leave. `start()` joins again. */
  stop(): Promise<void> {
    return this.serially(async () => {
      this.running = false;
      await Promise.all(this.entries.map((entry) => this.registry.stop(entry)));
    });
  }

  /**
   * Stops fetching and starting handlers on every member, keeping their membership, shards and
   * heartbeats; in-flight handlers finish and are acknowledged, revocations are answered as usual.
   * Lasts across stop()/start() until `resume()`. Members added by `setConcurrency` start paused.
   */
  pause(): void {
    this.paused = true;
    for (const entry of this.entries) entry.member.pause();
  }

  resume(): void {
    this.paused = false;
    for (const entry of this.entries) entry.member.resume();
  }

  /**
   * A listener: runs `n` members, adding `-mK` members (they join through the normal rebalance,
   * and the promise resolves when they joined, if the container runs) or removing the highest ones
   * (they drain and leave; their shards move through the rebalance). A bean consumer: its one
   * member's `runtimeMaxConcurrency` becomes `n`, live, without leaving. A bad `n` is a RangeError
   * naming the container and the value.
   */
  setConcurrency(n: number): Promise<void> {
    if (this.kind === 'consumer') {
      try {
        this.entries[0].member.setRuntimeMaxConcurrency(n);
      } catch (error) {
        return Promise.reject(new RangeError(`${this.source} (id "${this.id}"): ${(error as Error).message}`));
      }
      return Promise.resolve();
    }
    try {
      checkOption('nestjs.concurrency', n, { label: `${this.source} (id "${this.id}"): concurrency` });
    } catch (error) {
      return Promise.reject(error);
    }
    return this.serially(async () => {
      const added: RegisteredMember[] = [];
      while (this.entries.length + added.length < n) {
        const entry = await this.createMember!(this.entries.length + added.length);
        if (this.paused) entry.member.pause();
        added.push(entry);
      }
      this.entries.push(...added);
      const removed = this.entries.splice(n);
      await Promise.all([
        ...(this.running ? added.map((entry) => this.registry.start(entry)) : []),
        ...removed.map(async (entry) => {
          // Removed for good: a static member must not keep its shards, unread, for an instance that never comes.
          await this.registry.stop(entry, { leaveGroup: true });
          this.registry.unregister(entry);
        }),
      ]);
    });
  }

  /** Runs `operation` after every operation called before it (whether that failed or not). */
  private serially(operation: () => Promise<void>): Promise<void> {
    const result = this.queue.then(operation, operation);
    this.queue = result.catch(() => undefined);
    return result;
  }
}
