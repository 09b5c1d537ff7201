import { Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { STREAM_LISTENER_METADATA } from './coordinator.constants';
import type { StreamListenerOptions } from './stream-listener.decorator';

/** The one place that reads this package's decorator metadata. */
@Injectable()
export class CoordinatorMetadataAccessor {
  constructor(private readonly reflector: Reflector) {}

  streamListener(target: (...args: unknown[]) => unknown): StreamListenerOptions | undefined {
    return this.reflector.get<StreamListenerOptions | undefined>(STREAM_LISTENER_METADATA, target);
  }
}
