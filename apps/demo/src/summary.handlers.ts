import { Injectable, UseInterceptors } from '@nestjs/common';
import { StreamContext, StreamCtx, StreamListener, StreamPayload } from '@redis-stream-coordinator/nestjs';
import { SUMMARY_GROUP, SUMMARY_STREAM, type Summary } from './summary';
import { Stats } from './stats';
import { StreamLoggingInterceptor } from './stream-logging.interceptor';
import { SummaryValidationPipe } from './summary-validation.pipe';

/**
 * Four logical members of summary-group (`-m0` … `-m3`), each handling one entry at a time per
 * shard, through Nest's pipeline: the interceptor logs, the pipe validates the payload.
 */
@Injectable()
@UseInterceptors(StreamLoggingInterceptor)
export class SummaryHandlers {
  constructor(private readonly stats: Stats) {}

  @StreamListener({ id: 'summaries', streamPrefix: SUMMARY_STREAM, consumerGroup: SUMMARY_GROUP, concurrency: 4, shardCount: 8 })
  async onSummary(@StreamPayload(SummaryValidationPipe) summary: Summary, @StreamCtx() context: StreamContext): Promise<void> {
    this.stats.count('summarized', context.shardIndex);
    if (summary.text.trim() === '') this.stats.count('empty summaries', context.shardIndex);
  }
}
