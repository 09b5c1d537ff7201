/** A small SVG line chart (log-scale x), for the scaling curves in docs/benchmarks.md. */
export interface Series {
  name: string;
  points: [number, number][];
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e'];

export function lineChart(title: string, xLabel: string, yLabel: string, series: Series[], width = 560, height = 320): string {
  const margin = { left: 64, right: 150, top: 36, bottom: 48 };
  const xs = series.flatMap((s) => s.points.map(([x]) => x));
  const ys = series.flatMap((s) => s.points.map(([, y]) => y));
  const xMin = Math.log10(Math.min(...xs));
  const xMax = Math.log10(Math.max(...xs));
  const yMax = Math.max(...ys) * 1.1 || 1;
  const px = (x: number) => margin.left + ((Math.log10(x) - xMin) / (xMax - xMin || 1)) * (width - margin.left - margin.right);
  const py = (y: number) => height - margin.bottom - (y / yMax) * (height - margin.top - margin.bottom);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2 - margin.right / 2}" y="20" text-anchor="middle" font-size="13">${title}</text>`,
    `<line x1="${margin.left}" y1="${height - margin.bottom}" x2="${width - margin.right}" y2="${height - margin.bottom}" stroke="black"/>`,
    `<line x1="${margin.left}" y1="${margin.top}" x2="${margin.left}" y2="${height - margin.bottom}" stroke="black"/>`,
    `<text x="${(margin.left + width - margin.right) / 2}" y="${height - 12}" text-anchor="middle">${xLabel}</text>`,
    `<text transform="translate(16 ${(margin.top + height - margin.bottom) / 2}) rotate(-90)" text-anchor="middle">${yLabel}</text>`,
  ];
  for (const x of [...new Set(xs)].sort((a, b) => a - b)) {
    parts.push(`<text x="${px(x)}" y="${height - margin.bottom + 14}" text-anchor="middle">${x}</text>`);
  }
  for (let i = 0; i <= 4; i++) {
    const y = (yMax / 4) * i;
    parts.push(`<text x="${margin.left - 6}" y="${py(y) + 4}" text-anchor="end">${y >= 10 ? y.toFixed(0) : y.toFixed(1)}</text>`);
    parts.push(`<line x1="${margin.left}" y1="${py(y)}" x2="${width - margin.right}" y2="${py(y)}" stroke="#eee"/>`);
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const points = [...s.points].sort((a, b) => a[0] - b[0]);
    parts.push(
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const [x, y] of points) parts.push(`<circle cx="${px(x).toFixed(1)}" cy="${py(y).toFixed(1)}" r="3" fill="${color}"/>`);
    parts.push(`<text x="${width - margin.right + 10}" y="${margin.top + 16 * i + 10}" fill="${color}">${s.name}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
