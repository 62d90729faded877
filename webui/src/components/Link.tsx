import type { ComponentChildren } from "preact";
import { navigate } from "../router";

/** An ordinary link (open in a new tab works) that moves within the app without a reload. */
export function Link(props: { href: string; class?: string; children: ComponentChildren; title?: string }) {
  const onClick = (event: MouseEvent) => {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(props.href);
  };
  return (
    <a href={props.href} class={props.class} title={props.title} onClick={onClick}>
      {props.children}
    </a>
  );
}
