import { Injectable, Module } from '@nestjs/common';
import {
  CoordinatorAdmin,
  CoordinatorModule,
  StreamListener,
  StreamListenerRegistry,
  type StreamMessage,
} from '@redis-stream-coordinator/nestjs';

@Injectable()
export class SearchIndexer {
  readonly indexed: string[] = [];

  @StreamListener({ id: 'search-indexer', streamPrefix: 'articles', consumerGroup: 'search-index', shardCount: 2 })
  onArticle(message: StreamMessage<{ title: string }>) {
    this.indexed.push(message.payload.title);
  }
}

/** After a bad deploy of the indexer: read every article written since `since` again. */
@Injectable()
export class Reindex {
  constructor(
    private readonly listeners: StreamListenerRegistry,
    private readonly admin: CoordinatorAdmin,
  ) {}

  async since(since: Date) {
    const indexer = this.listeners.getOrThrow('search-indexer');
    await indexer.stop(); // the group's members leave: a reset is refused while any is alive
    await this.admin.resetOffsets('articles', 'search-index', { to: { datetime: since } });
    await indexer.start(); // every shard is read again from the first entry at or after `since`
  }
}

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [SearchIndexer, Reindex],
})
export class SearchModule {}
