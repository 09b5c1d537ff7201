import { Controller, Injectable, Module, Param, ParseIntPipe, Post } from '@nestjs/common';
import {
  CoordinatorAdmin,
  CoordinatorModule,
  StreamListener,
  StreamListenerRegistry,
  type StreamMessage,
} from '@redis-stream-coordinator/nestjs';

@Injectable()
export class Thumbnails {
  readonly rendered: string[] = [];

  // Two members in this process; a second instance of the application brings two more, and the
  // group's eight shards are spread over all of them.
  @StreamListener({ id: 'thumbnails', streamPrefix: 'images', consumerGroup: 'thumbnails', shardCount: 8, concurrency: 2 })
  async onImage(message: StreamMessage<{ url: string }>) {
    this.rendered.push(message.payload.url);
  }
}

@Controller('scale')
export class ScaleController {
  constructor(
    private readonly listeners: StreamListenerRegistry,
    private readonly admin: CoordinatorAdmin,
  ) {}

  /** More members in this process (up to the shard count: a shard has one owner at a time). */
  @Post('members/:count')
  members(@Param('count', ParseIntPipe) count: number) {
    return this.listeners.getOrThrow('thumbnails').setConcurrency(count);
  }

  /** More shards: more members can work at once; keys keep their order across the resize (docs/resharding.md). */
  @Post('shards/:count')
  shards(@Param('count', ParseIntPipe) count: number) {
    return this.admin.resizeShards('images', count);
  }
}

@Module({
  imports: [CoordinatorModule.forRootAsync({ useFactory: () => ({ redis: { url: process.env.REDIS_URL } }) })],
  providers: [Thumbnails],
  controllers: [ScaleController],
})
export class ImagesModule {}
