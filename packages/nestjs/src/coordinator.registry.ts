import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import type { CoordinatedMember } from '@redis-stream-coordinator/core';
import { COORDINATOR_CONNECTION } from './coordinator.constants';
import { COORDINATOR_MODULE_OPTIONS } from './coordinator.module-definition';
import type { CoordinatorConnection } from './coordinator-connection';
import type { CoordinatorModuleOptions } from './coordinator-module-options';
import { ThrottledLogger } from './throttled-logger';

export interface RegisteredMember {
  member: CoordinatedMember;
  /** Where it came from, for log lines: `SummaryHandlers.onSummary` or `bean auditConsumer`. */
  source: string;
}

/**
 * Every member of the application. Members start when the application has bootstrapped (in the
 * background: an unreachable Redis gives retries and log lines, never a hung or crashing start),
 * drain and leave the group before the application shuts down, and the connection the module
 * created is closed last.
 */
@Injectable()
export class CoordinatorRegistry implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly logger = new Logger('CoordinatorModule');
  private readonly throttled = new ThrottledLogger(this.logger);
  private readonly registered: RegisteredMember[] = [];
  private stopping = false;

  constructor(
    @Inject(COORDINATOR_CONNECTION) private readonly connection: CoordinatorConnection,
    @Inject(COORDINATOR_MODULE_OPTIONS) private readonly options: CoordinatorModuleOptions,
  ) {}

  register(member: CoordinatedMember, source: string): void {
    member.on('error', (error) => this.throttled.warn(`${member.memberId}:${error.message}`, `member ${member.memberId} (${source}): ${error.message}`));
    member.on('lease-lost', () => this.logger.warn(`member ${member.memberId} (${source}) lost its lease: no heartbeat got through; it rejoins when Redis answers`));
    member.on('fenced', (event) => this.logger.warn(`member ${member.memberId} (${source}) was fenced (${event.errorCode}); it rejoins`));
    this.registered.push({ member, source });
  }

  members(): CoordinatedMember[] {
    return this.registered.map((r) => r.member);
  }

  entries(): readonly RegisteredMember[] {
    return this.registered;
  }

  onApplicationBootstrap(): void {
    for (const entry of this.registered) void this.startWithRetries(entry);
  }

  private async startWithRetries({ member, source }: RegisteredMember): Promise<void> {
    const delayMs = this.options.startRetryDelayMs ?? 2000;
    while (!this.stopping) {
      try {
        await member.start();
        this.logger.log(`member ${member.memberId} (${source}) joined ${member.options.streamPrefix}/${member.options.consumerGroup}`);
        return;
      } catch (error) {
        if (this.stopping) return;
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
    await this.connection.close();
  }
}
