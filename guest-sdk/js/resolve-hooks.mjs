// Node module resolution hooks (see register.mjs): 'weir-sdk' → weir-sdk.js and
// 'weir-sdk/testing' → testing.js, beside this file.

const SDK_MODULES = {
  'weir-sdk': new URL('./weir-sdk.js', import.meta.url).href,
  'weir-sdk/testing': new URL('./testing.js', import.meta.url).href,
};

/**
 * Resolves the SDK's bare specifiers; leaves every other one to Node.
 * @param {string} specifier
 * @param {object} context
 * @param {Function} nextResolve
 */
export async function resolve(specifier, context, nextResolve) {
  const url = SDK_MODULES[specifier];
  return url ? { url, shortCircuit: true } : nextResolve(specifier, context);
}
