import { useEffect, useState } from "preact/hooks";
import { getMaster, login } from "../api/endpoints";
import { setToken } from "../api/http";
import { saltAndHash } from "../api/password";
import type { SsoProvider, User } from "../api/types";
import { navigate, useLocation } from "../router";

/** Only same-site paths are followed after login, never another origin. */
function safeRedirect(value: string | null): string {
  if (!value || !value.startsWith("/") || value.startsWith("//") || value.startsWith("/login")) {
    return "/experiments";
  }
  return value;
}

export function LoginPage(props: { onLogin: (user: User) => void }) {
  const { query } = useLocation();
  const [username, setUsername] = useState("determined");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [providers, setProviders] = useState<SsoProvider[]>([]);

  // Single sign-on: the master's provider (its /oidc/sso starts the login and comes back here
  // with the session in the `auth` cookie, the cookie a password login sets too).
  const ssoHref = (provider: SsoProvider) =>
    `${provider.ssoUrl}?redirect=${encodeURIComponent(safeRedirect(query.get("redirect")))}`;
  const startSso = (provider: SsoProvider) => {
    setToken(null); // a stored older token would win over the new session's cookie
    window.location.assign(ssoHref(provider));
  };

  useEffect(() => {
    const controller = new AbortController();
    getMaster(controller.signal)
      .then((info) => {
        const offered = info.ssoProviders ?? [];
        setProviders(offered);
        const always = offered.find((p) => p.alwaysRedirect);
        if (always) startSso(always);
      })
      .catch(() => setProviders([]));
    return () => controller.abort();
  }, []);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      const response = await login(username.trim(), await saltAndHash(password));
      setToken(response.token);
      if (response.user) props.onLogin(response.user);
      navigate(safeRedirect(query.get("redirect")), { replace: true });
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
      setBusy(false);
    }
  };

  return (
    <main class="login">
      <form class="login-card" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title">Sign in to Cairn</h1>
        <label for="login-username">Username</label>
        <input
          id="login-username"
          name="username"
          autocomplete="username"
          value={username}
          onInput={(e) => setUsername((e.target as HTMLInputElement).value)}
          required
          autofocus
        />
        <label for="login-password">Password</label>
        <input
          id="login-password"
          name="password"
          type="password"
          autocomplete="current-password"
          value={password}
          onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
        />
        {error ? (
          <p class="error-note" role="alert">
            {error}
          </p>
        ) : null}
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        {providers.map((provider) => (
          <a
            key={provider.name}
            class="button sso"
            href={ssoHref(provider)}
            onClick={(e) => {
              e.preventDefault();
              startSso(provider);
            }}
          >
            Sign in with {provider.name}
          </a>
        ))}
        <p class="hint">A new cluster has the users “determined” and “admin” with empty passwords.</p>
      </form>
    </main>
  );
}
