import { Injectable } from '@nestjs/common';
import type { StreamMessage } from '@redis-stream-coordinator/nestjs';
import type { Summary } from './summary';
import { Stats } from './stats';

/** The audit trail: a second consumer group on the same stream, as one bean member with 4 workers. */
@Injectable()
export class AuditService {
  constructor(private readonly stats: Stats) {}

  async handle(message: StreamMessage<Summary>): Promise<void> {
    this.stats.count('audited', message.shardIndex);
  }
}
