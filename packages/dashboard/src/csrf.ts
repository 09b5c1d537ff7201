import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The cookie and the header that carry the CSRF token (double submit). */
export const CSRF_COOKIE = 'rsc_csrf';
export const CSRF_HEADER = 'x-rsc-csrf';

/** A fresh token: 32 random bytes, base64url (safe inside a cookie and an HTML attribute). */
export function newCsrfToken(): string {
  return randomBytes(32).toString('base64url');
}

/** The token of the request's cookie, if it has a well-formed one. */
export function csrfCookie(request: IncomingMessage): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, value] = part.trim().split('=');
    if (name === CSRF_COOKIE && value && /^[A-Za-z0-9_-]{43}$/.test(value)) return value;
  }
  return undefined;
}

/** The Set-Cookie value for a token: HttpOnly, SameSite=Strict, only sent under the dashboard's path. */
export function csrfSetCookie(token: string, path: string, secure: boolean): string {
  return `${CSRF_COOKIE}=${token}; Path=${path}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}

/**
 * Why an action request is refused as a possible cross-site request, or undefined when it passes:
 * the token of the header must equal the cookie's (another site can neither read the cookie nor,
 * without a CORS preflight we never allow, send the header), and a browser's Origin, when given,
 * must be the dashboard's own host.
 */
export function csrfRefusal(request: IncomingMessage): string | undefined {
  const cookie = csrfCookie(request);
  const header = request.headers[CSRF_HEADER];
  if (!cookie) return 'no CSRF cookie: load the dashboard page first';
  if (typeof header !== 'string' || header.length !== cookie.length || !timingSafeEqual(Buffer.from(header), Buffer.from(cookie))) {
    return `the ${CSRF_HEADER} header does not match the CSRF cookie`;
  }
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== 'null') {
    let host: string;
    try {
      host = new URL(origin).host;
    } catch {
      return `malformed Origin ${JSON.stringify(origin)}`;
    }
    if (host !== request.headers.host) return `cross-origin request from ${origin}`;
  } else if (origin === 'null') {
    return 'an opaque origin may not act';
  }
  return undefined;
}
