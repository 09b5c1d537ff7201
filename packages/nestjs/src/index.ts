/**
 * NestJS starter for Redis Stream Coordinator. This package is a skeleton until the starter issue
 * lands: CoordinatorModule, @StreamListener and bean consumers build on the core member runtime.
 */
export { CoordinatorAdmin, CoordinatorClient } from '@redis-stream-coordinator/core';
