import {
  type BeforeApplicationShutdown,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { type CoordinatedMember, type StopOptions, StreamNotFoundError } from '@redis-stream-coordinator/core';
import type { CoordinatorConnection } from './coordinator-connection';
import { CoordinatorConnections } from './coordinator-connections';
import { MemberEventLog } from './member-event-log';
import { ThrottledLogger } from './throttled-logger';

const DEFAULT_START_RETRY_DELAY_MS = 2000;

/**
 * Errors that no retry can cure, from start() or an 'error' event: the member gives up and health
 * reports it. Matched by name because the error classes live in the core package, which may be a
 * different copy.
 */
const FATAL_MEMBER_ERRORS = new Set(['FencedInstanceIdError']);

/**
 * A member's error as a Nest application reads it: a missing stream names the listener's (or bean's)
 * own `shardCount` rather than the core member's. Matched by name, like FATAL_MEMBER_ERRORS.
 */
function inNestTerms(error: Error, source: string): string {
  if (error.name !== 'StreamNotFoundError') return error.message;
  const { streamPrefix, context } = error as StreamNotFoundError;
  return new StreamNotFoundError(
    streamPrefix,
    context,
    `give ${source} shardCount (or the module's defaults.shardCount) to create it when its members join, or create it with CoordinatorAdmin.createStream`,
  ).message;
}

export interface RegisteredMember {
  member: CoordinatedMember;
  /** Where it came from, for log lines: `@StreamListener on SummaryHandlers.onSummary` or `bean auditConsumer`. */
  source: string;
  /** The `forRoot` whose Redis and options the member uses (its `name`, `'default'` when unnamed). */
  connection: CoordinatorConnection;
  /** Why the member stopped for good (its id is in use by another live process); health reports it. */
  fatalError?: string;
  /** The id of the listener container (StreamListenerRegistry) the member belongs to. */
  listenerId: string;
  /**
   * Whether the member should run: set by its container's start()/stop() (and `autoStartup`). A
   * member that should not run is not a readiness problem.
   */
  desired: 'running' | 'stopped';
  /** The start (with its retries) under way, if any. */
  starting?: Promise<void>;
}

/**
 * Every member of the application, across all `CoordinatorModule.forRoot` imports. Members start
 * when the application has bootstrapped (in the background: an unreachable Redis gives retries and
 * log lines, never a hung or crashing start), drain and leave the group before the application
 * shuts down, and the connections the modules created are closed last.
 */
@Injectable()
export class CoordinatorRegistry implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly logger = new Logger('CoordinatorModule');
  private readonly throttled = new ThrottledLogger(this.logger);
  /** Rebalances, dead letters, fences and lost leases of every member, one line each, bounded under storms. */
  private readonly events = new MemberEventLog(this.logger);
  private readonly registered: RegisteredMember[] = [];
  private stopping = false;
  private bootstrapped = false;

  constructor(private readonly connections: CoordinatorConnections) {}

  /** Whether the application has bootstrapped (members registered later start when their container says). */
  get isBootstrapped(): boolean {
    return this.bootstrapped;
  }

  /** Whether the application is shutting down: no member starts or is registered any more. */
  get isStopping(): boolean {
    return this.stopping;
  }

  register(
    member: CoordinatedMember,
    source: string,
    connection: CoordinatorConnection,
    listener: { listenerId: string; autoStartup: boolean } = { listenerId: source, autoStartup: true },
  ): RegisteredMember {
    if (this.stopping) throw new Error(`CoordinatorModule: ${source}: the application is shutting down, no member can be registered`);
    const entry: RegisteredMember = {
      member,
      source,
      connection,
      listenerId: listener.listenerId,
      desired: listener.autoStartup ? 'running' : 'stopped',
    };
    member.on('error', (error) => {
      if (FATAL_MEMBER_ERRORS.has(error.name)) this.giveUp(entry, error);
      else {
        const message = inNestTerms(error, source);
        this.throttled.warn(`${member.memberId}:${message}`, `member ${member.memberId} (${source}): ${message}`);
      }
    });
    if (connection.options.logMemberEvents !== false) this.events.watch(member, source);
    this.registered.push(entry);
    return entry;
  }

  /** Forgets a member its container removed (after stopping it): health no longer lists it. */
  unregister(entry: RegisteredMember): void {
    const index = this.registered.indexOf(entry);
    if (index >= 0) this.registered.splice(index, 1);
    entry.member.removeAllListeners();
  }

  /** A member that can never work (its id is another live process's): one error line, and health shows it. */
  private giveUp(entry: RegisteredMember, error: Error): void {
    if (entry.fatalError) return;
    entry.fatalError = `stopped for good: ${error.name}: ${error.message}`;
    this.logger.error(`member ${entry.member.memberId} (${entry.source}) ${entry.fatalError}; it will not retry or rejoin`);
  }

  members(): CoordinatedMember[] {
    return this.registered.map((r) => r.member);
  }

  entries(): readonly RegisteredMember[] {
    return this.registered;
  }

  onApplicationBootstrap(): void {
    this.bootstrapped = true;
    for (const entry of this.registered) {
      if (entry.desired === 'running') void this.start(entry);
    }
  }

  /**
   * Starts a member in the background with retries while Redis cannot be reached; resolves once it
   * joined, or when it should no longer run (stopped, shutting down, stopped for good). One start
   * per member at a time: a second call shares the first.
   */
  start(entry: RegisteredMember): Promise<void> {
    entry.desired = 'running';
    entry.starting ??= this.startWithRetries(entry).finally(() => {
      entry.starting = undefined;
    });
    return entry.starting;
  }

  /**
   * Stops a member (drains, acknowledges, leaves); a start retrying in the background gives up.
   * `leaveGroup`: a static member leaves for good instead of departing (it is removed, not restarted).
   */
  async stop(entry: RegisteredMember, options: StopOptions = {}): Promise<void> {
    entry.desired = 'stopped';
    await entry.member
      .stop(options)
      .catch((error: Error) =>
        this.logger.warn(`member ${entry.member.memberId} (${entry.source}) did not stop cleanly: ${error.message}`),
      );
  }

  private async startWithRetries(entry: RegisteredMember): Promise<void> {
    const { member, source, connection } = entry;
    const delayMs = connection.options.startRetryDelayMs ?? DEFAULT_START_RETRY_DELAY_MS;
    while (!this.stopping && entry.desired === 'running' && !entry.fatalError) {
      if (member.isRunning()) return;
      try {
        await member.start();
        this.logger.log(`member ${member.memberId} (${source}) joined ${member.options.streamPrefix}/${member.options.consumerGroup}`);
        return;
      } catch (error) {
        if (this.stopping || entry.desired !== 'running') return;
        if (FATAL_MEMBER_ERRORS.has((error as Error).name)) {
          this.giveUp(entry, error as Error);
          return;
        }
        this.throttled.warn(
          `start:${member.memberId}`,
          `member ${member.memberId} (${source}) cannot start yet: ${(error as Error).message}; retrying every ${delayMs} ms`,
        );
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.registered.map(({ member }) => member.stop().catch(() => undefined)));
  }

  async onApplicationShutdown(): Promise<void> {
    this.events.close();
    await Promise.all(this.connections.all().map((connection) => connection.close()));
  }
}
