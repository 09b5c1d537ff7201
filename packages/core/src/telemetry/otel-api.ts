import type * as OtelApi from '@opentelemetry/api';

/**
 * `@opentelemetry/api` is an optional peer dependency: the library loads it when the application has
 * it installed, and does without telemetry when it has not. It is loaded once, on first use.
 */
export type Otel = typeof OtelApi;

let loaded: Otel | null | undefined;

/** The OpenTelemetry API, or undefined when the application does not have it installed. */
export function otelApi(): Otel | undefined {
  if (loaded === undefined) {
    try {
      // A plain require, not an import: a missing optional peer must not fail loading the library.
      loaded = require('@opentelemetry/api') as Otel;
    } catch {
      loaded = null;
    }
  }
  return loaded ?? undefined;
}

/** Overrides what otelApi() returns (tests of the "not installed" path); undefined restores loading. */
export function setOtelApiForTests(api: Otel | null | undefined): void {
  loaded = api;
}

/** Name and version of the instrumentation scope (the meter and the tracer). */
export const INSTRUMENTATION_SCOPE = '@redis-stream-coordinator/core';
export const INSTRUMENTATION_VERSION = '0.1.0';

/**
 * The library's meter, or undefined when no meter provider is registered. The metrics API has no
 * proxy: a meter taken before the SDK registers stays a no-op meter for good, so instruments are
 * created when a member or producer starts working, and only when a provider is there (otherwise
 * every recording would still cost a call and, for attributes, an object).
 */
export function registeredMeter(api: Otel): OtelApi.Meter | undefined {
  const meter = api.metrics.getMeter(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  return meter === api.createNoopMeter() ? undefined : meter;
}

/**
 * Whether a tracer provider is registered. The global tracer provider is a proxy whose delegate is
 * the API's no-op provider until an SDK registers; a no-op span would still be an allocation per
 * entry, so spans are only started when this is true. Cheap enough to ask per entry (no allocation).
 */
export function tracerProviderRegistered(api: Otel): boolean {
  const provider = api.trace.getTracerProvider();
  if (!(provider instanceof api.ProxyTracerProvider)) return true;
  return provider.getDelegate() !== noopTracerProvider(api);
}

let noopProvider: OtelApi.TracerProvider | undefined;
function noopTracerProvider(api: Otel): OtelApi.TracerProvider {
  // A fresh proxy without a delegate hands out the API's own no-op provider singleton.
  noopProvider ??= new api.ProxyTracerProvider().getDelegate();
  return noopProvider;
}
