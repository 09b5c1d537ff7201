import { type CallHandler, type ExecutionContext, Injectable, Logger, type NestInterceptor } from '@nestjs/common';
import { STREAM_CONTEXT_TYPE, type StreamContext, type StreamContextType } from '@redis-stream-coordinator/nestjs';
import { tap } from 'rxjs';

/**
 * Logs how a stream handler ended, for every 100th entry and for every failure: which entry, shard,
 * member epoch and delivery, and how long it took. Applied to HTTP handlers it does nothing.
 */
@Injectable()
export class StreamLoggingInterceptor implements NestInterceptor {
  private readonly logger = new Logger('StreamLogging');
  private seen = 0;

  intercept(context: ExecutionContext, next: CallHandler) {
    if (context.getType<StreamContextType>() !== STREAM_CONTEXT_TYPE) return next.handle();
    const stream = context.switchToRpc().getContext<StreamContext>();
    const started = Date.now();
    const where = () =>
      `${stream.streamPrefix}/${stream.consumerGroup} shard ${stream.shardIndex} entry ${stream.id} (epoch ${stream.memberEpoch}, delivery ${stream.deliveryCount})`;
    return next.handle().pipe(
      tap({
        next: () => {
          this.seen += 1;
          if (this.seen % 100 === 1) this.logger.log(`${where()} handled in ${Date.now() - started} ms (${this.seen} so far)`);
        },
        error: (error: Error) => this.logger.warn(`${where()} failed after ${Date.now() - started} ms: ${error.message}`),
      }),
    );
  }
}
