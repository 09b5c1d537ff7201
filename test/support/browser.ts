import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

/** Debian's chromium (.ci/run installs it where it is missing). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Why browser tests cannot run here, or undefined when chromium answers. */
export function chromiumMissing(): string | undefined {
  if (!fs.existsSync(CHROMIUM))
    return `${CHROMIUM} is not installed (apt-get install chromium, or CHROMIUM_PATH=<a chromium binary>; .ci/run installs it): the dashboard's browser tests are skipped`;
  try {
    execFileSync(CHROMIUM, ['--version'], { stdio: 'ignore', timeout: 10_000 });
    return undefined;
  } catch (error) {
    return `${CHROMIUM} does not start (${(error as Error).message}): the dashboard's browser tests are skipped`;
  }
}

/** A headless Chromium with a fresh profile, deleted when it closes. */
export async function launchBrowser(
  viewport = { width: 1280, height: 900 },
): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-chromium-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: FLAGS, viewport });
  return {
    context,
    close: async () => {
      await context.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}
