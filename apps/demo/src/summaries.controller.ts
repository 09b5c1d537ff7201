import { BadRequestException, Body, Controller, Get, Post, ServiceUnavailableException } from '@nestjs/common';
import { CoordinatorAdmin, CoordinatorHealthIndicator, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { AUDIT_GROUP, SUMMARY_GROUP, SUMMARY_STREAM, type Summary } from './summary';
import { Stats } from './stats';

@Controller()
export class SummariesController {
  constructor(
    private readonly publisher: StreamPublisher,
    private readonly admin: CoordinatorAdmin,
    private readonly health: CoordinatorHealthIndicator,
    private readonly stats: Stats,
  ) {}

  /** POST /summaries {"userId": "u1", "text": "hello"}: publishes one keyed event. */
  @Post('summaries')
  async publish(@Body() body: { userId?: unknown; text?: unknown }) {
    if (typeof body?.userId !== 'string' || body.userId === '' || typeof body.text !== 'string') {
      throw new BadRequestException('give {"userId": "<non-empty string>", "text": "<string>"}');
    }
    const summary: Summary = { userId: body.userId, text: body.text, at: new Date().toISOString() };
    return this.publisher.publish(SUMMARY_STREAM, { key: summary.userId, payload: summary });
  }

  /** GET /group: both groups as describeGroup sees them, and what this process handled. */
  @Get('group')
  async group() {
    const [summary, audit] = await Promise.all([
      this.admin.describeGroup(SUMMARY_STREAM, SUMMARY_GROUP).catch((error: Error) => ({ error: error.message })),
      this.admin.describeGroup(SUMMARY_STREAM, AUDIT_GROUP).catch((error: Error) => ({ error: error.message })),
    ]);
    return { [SUMMARY_GROUP]: summary, [AUDIT_GROUP]: audit, thisProcess: this.stats.snapshot() };
  }

  /**
   * GET /health (and /health/ready): readiness, what a load balancer or a Kubernetes readiness probe
   * reads: Redis answering PING, and each member's state, epoch, owned shards and problems; 503 with
   * the reasons when something is down.
   */
  @Get(['health', 'health/ready'])
  async readiness() {
    const health = await this.health.check();
    if (health.coordinator.status === 'down') throw new ServiceUnavailableException(health);
    return health;
  }

  /** GET /health/live: liveness, down only when a member stopped for good; a Redis outage keeps it up. */
  @Get('health/live')
  liveness() {
    const liveness = this.health.checkLiveness();
    if (liveness.coordinator.status === 'down') throw new ServiceUnavailableException(liveness);
    return liveness;
  }
}
