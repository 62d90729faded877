// Vite turns CSS imports into stylesheets of the build.
declare module "*.css";
