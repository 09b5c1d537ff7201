import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { Inject } from '@nestjs/common';
import { COORDINATOR_CONNECTION, DEFAULT_CONNECTION_NAME } from './coordinator.constants';
import { StreamPublisher } from './stream-publisher';

/** `undefined` and `'default'` both mean the unnamed connection (as TypeORM's data source names do). */
export function connectionName(name: string | undefined): string {
  return name ?? DEFAULT_CONNECTION_NAME;
}

/** Injection token of a module's CoordinatorConnection: `COORDINATOR_CONNECTION` for the unnamed one. */
export function getCoordinatorConnectionToken(connection?: string): string {
  const name = connectionName(connection);
  return name === DEFAULT_CONNECTION_NAME ? COORDINATOR_CONNECTION : `${COORDINATOR_CONNECTION}:${name}`;
}

/** Injection token of a module's StreamPublisher: the class itself for the unnamed one. */
export function getStreamPublisherToken(connection?: string): string | typeof StreamPublisher {
  const name = connectionName(connection);
  return name === DEFAULT_CONNECTION_NAME ? StreamPublisher : `StreamPublisher:${name}`;
}

/** Injection token of a module's CoordinatorAdmin: the class itself for the unnamed one. */
export function getCoordinatorAdminToken(connection?: string): string | typeof CoordinatorAdmin {
  const name = connectionName(connection);
  return name === DEFAULT_CONNECTION_NAME ? CoordinatorAdmin : `CoordinatorAdmin:${name}`;
}

/**
 * Injects the StreamPublisher of a named connection (`forRoot({ name })`).
 *
 * @example
 * constructor(@InjectStreamPublisher('audit') private readonly auditPublisher: StreamPublisher) {}
 */
export const InjectStreamPublisher = (connection?: string): ParameterDecorator & PropertyDecorator =>
  Inject(getStreamPublisherToken(connection));

/**
 * Injects the CoordinatorAdmin of a named connection (`forRoot({ name })`).
 *
 * @example
 * constructor(@InjectCoordinatorAdmin('audit') private readonly auditAdmin: CoordinatorAdmin) {}
 */
export const InjectCoordinatorAdmin = (connection?: string): ParameterDecorator & PropertyDecorator =>
  Inject(getCoordinatorAdminToken(connection));
