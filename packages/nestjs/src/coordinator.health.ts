import { Injectable } from '@nestjs/common';
import { CoordinatorRegistry } from './coordinator.registry';

export interface MemberHealth {
  memberId: string;
  memberName: string;
  streamPrefix: string;
  consumerGroup: string;
  joined: boolean;
  memberEpoch: number;
  ownedShards: number[];
  activeHandlers: number;
}

export type CoordinatorHealth = Record<string, { status: 'up' | 'down'; members: MemberHealth[] }>;

/** An error in the shape `@nestjs/terminus` reports (message and causes). */
export class CoordinatorHealthError extends Error {
  constructor(readonly causes: CoordinatorHealth) {
    super('some coordinator members are not joined');
    this.name = 'CoordinatorHealthError';
  }
}

/**
 * Each member's state, epoch and owned shards. `up` when every member has joined and holds a live
 * lease. Works with `@nestjs/terminus` (an optional peer dependency):
 *
 * @example
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.coordinator.isHealthy('coordinator')]); }
 */
@Injectable()
export class CoordinatorHealthIndicator {
  constructor(private readonly registry: CoordinatorRegistry) {}

  check(key = 'coordinator'): CoordinatorHealth {
    const members = this.registry.entries().map(({ member }): MemberHealth => {
      const stats = member.stats();
      return {
        memberId: member.memberId,
        memberName: member.options.memberName,
        streamPrefix: member.options.streamPrefix,
        consumerGroup: member.options.consumerGroup,
        joined: stats.joined,
        memberEpoch: stats.memberEpoch,
        ownedShards: stats.ownedShards,
        activeHandlers: stats.activeHandlers,
      };
    });
    return { [key]: { status: members.every((m) => m.joined) ? 'up' : 'down', members } };
  }

  /** `check`, but throws CoordinatorHealthError when down (what terminus expects of an indicator). */
  async isHealthy(key = 'coordinator'): Promise<CoordinatorHealth> {
    const result = this.check(key);
    if (result[key].status === 'down') throw new CoordinatorHealthError(result);
    return result;
  }
}
