import { Injectable, Logger } from '@nestjs/common';
import { StreamListener, type StreamMessage } from '@redis-stream-coordinator/nestjs';
import { SUMMARY_GROUP, SUMMARY_STREAM, type Summary } from './summary';
import { Stats } from './stats';

/** Four logical members of summary-group (`-m0` … `-m3`), each handling one entry at a time per shard. */
@Injectable()
export class SummaryHandlers {
  private readonly logger = new Logger('SummaryHandlers');

  constructor(private readonly stats: Stats) {}

  @StreamListener({ streamPrefix: SUMMARY_STREAM, consumerGroup: SUMMARY_GROUP, concurrency: 4, shardCount: 8 })
  async onSummary(message: StreamMessage<Summary>): Promise<void> {
    this.stats.count('summarized', message.shardIndex);
    if (this.stats.total('summarized') % 100 === 1) {
      this.logger.log(`shard ${message.shardIndex}: ${message.payload.userId} "${message.payload.text}" (${this.stats.total('summarized')} so far)`);
    }
  }
}
