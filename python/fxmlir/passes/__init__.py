"""The FX rewrites of fxmlir's ATen graphs."""
