import { Controller, Get, HttpCode, NotFoundException, Param, Post } from '@nestjs/common';
import { type StreamListenerContainer, StreamListenerRegistry } from '@redis-stream-coordinator/nestjs';

/** Runtime control of the listeners through StreamListenerRegistry: pause and resume one by its id. */
@Controller('listeners')
export class ListenersController {
  constructor(private readonly listeners: StreamListenerRegistry) {}

  /** GET /listeners: every listener and consumer, running or not, paused or not. */
  @Get()
  all() {
    return this.listeners.getAll().map(describe);
  }

  /** POST /listeners/summaries/pause: its members keep their shards and heartbeats and fetch nothing. */
  @Post(':id/pause')
  @HttpCode(200)
  pause(@Param('id') id: string) {
    const listener = this.get(id);
    listener.pause();
    return describe(listener);
  }

  /** POST /listeners/summaries/resume */
  @Post(':id/resume')
  @HttpCode(200)
  resume(@Param('id') id: string) {
    const listener = this.get(id);
    listener.resume();
    return describe(listener);
  }

  private get(id: string): StreamListenerContainer {
    const listener = this.listeners.get(id);
    if (!listener) throw new NotFoundException(`no listener with id "${id}" (ids: ${this.listeners.ids().join(', ')})`);
    return listener;
  }
}

function describe(listener: StreamListenerContainer) {
  return {
    id: listener.id,
    kind: listener.kind,
    running: listener.isRunning(),
    paused: listener.isPaused(),
    concurrency: listener.concurrency,
  };
}
