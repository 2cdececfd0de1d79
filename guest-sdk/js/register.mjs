// Makes the bare specifiers 'weir-sdk' and 'weir-sdk/testing' resolve to this directory's
// files in Node, as build.mjs does in a bundle, so an operator's app.js can be imported by
// `node --test` without installing the SDK as a package:
//
//   node --import ./guest-sdk/js/register.mjs --test examples/*/js/
//
// or, in a test file, `import '<path>/register.mjs'` first and then `await import('./app.js')`
// (static imports are resolved before the hook is registered).

import { register } from 'node:module';

register('./resolve-hooks.mjs', import.meta.url);
