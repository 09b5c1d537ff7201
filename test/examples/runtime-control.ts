import { Controller, Injectable, Module, Param, Post } from '@nestjs/common';
import { CoordinatorModule, type StreamMessage, StreamListener, StreamListenerRegistry } from '@redis-stream-coordinator/nestjs';

@Injectable()
export class InvoiceHandlers {
  readonly sent: string[] = [];

  // Not started with the application: an operator starts it (autoStartup: false).
  @StreamListener({ id: 'invoices', autoStartup: false, streamPrefix: 'invoice', consumerGroup: 'mailer', concurrency: 2, shardCount: 4 })
  async onInvoice(message: StreamMessage<{ to: string }>) {
    // Aborted when the member stops waiting for this call (timeout, revocation, lease lost, stop).
    await deliver(message.payload.to, message.signal);
    this.sent.push(message.payload.to);
  }
}

async function deliver(to: string, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted(); // a real mailer passes the signal to its HTTP client
}

@Controller('listeners')
export class ListenersController {
  constructor(private readonly listeners: StreamListenerRegistry) {}

  @Post(':id/start') start(@Param('id') id: string) { return this.listeners.getOrThrow(id).start(); }
  @Post(':id/pause') pause(@Param('id') id: string) { this.listeners.getOrThrow(id).pause(); }
  @Post(':id/resume') resume(@Param('id') id: string) { this.listeners.getOrThrow(id).resume(); }
  @Post(':id/stop') stop(@Param('id') id: string) { return this.listeners.getOrThrow(id).stop(); }
  @Post(':id/concurrency/:n') scale(@Param('id') id: string, @Param('n') n: string) {
    return this.listeners.getOrThrow(id).setConcurrency(Number(n));
  }
}

@Module({
  imports: [CoordinatorModule.forRoot({ redis: { url: process.env.REDIS_URL } })],
  controllers: [ListenersController],
  providers: [InvoiceHandlers],
})
export class AppModule {}
