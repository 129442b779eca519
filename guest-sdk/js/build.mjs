// Builds a JavaScript guest into a component with componentize-js (run by `tessera guest build`).
//   usage: node build.mjs COMPONENTIZE_JS_DIR ENTRY.js WIT_DIR WORLD OUT.wasm DISABLED_FEATURES
// DISABLED_FEATURES is a comma-separated list of componentize-js features to build without.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [packageDir, sourcePath, witPath, worldName, out, disabled = ''] = process.argv.slice(2);
if (!out) {
  console.error('usage: node build.mjs COMPONENTIZE_JS_DIR ENTRY.js WIT_DIR WORLD OUT.wasm [DISABLED]');
  process.exit(2);
}
// componentize-js is an ES module package: import its entry point by path, from wherever
// scripts/setup-js-toolchain.sh installed it.
const manifest = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8'));
const exported = manifest.exports?.import ?? manifest.exports?.['.']?.import ?? manifest.main;
const { componentize } = await import(pathToFileURL(join(packageDir, exported)).href);
try {
  const { component } = await componentize({
    sourcePath,
    witPath,
    worldName,
    disableFeatures: disabled.split(',').filter(Boolean),
  });
  await writeFile(out, component);
} catch (e) {
  console.error(String(e?.stack ?? e));
  process.exit(1);
}
